//go:build !linux

package runnerstate

// kernelLock is one granted lock the kernel lists for a file.
type kernelLock struct {
	pid       int
	exclusive bool
	devMatch  bool
}

// kernelLocks: only Linux lists lock holders (/proc/locks). Elsewhere known is
// false and callers probe with a non-blocking shared lock instead, which is
// why Acquire retries a busy answer briefly on these systems.
func kernelLocks(path string) (locks []kernelLock, exists, known bool) {
	return nil, true, false
}

// kernelListsLocks is false: only Linux lists lock holders.
func kernelListsLocks() bool { return false }
