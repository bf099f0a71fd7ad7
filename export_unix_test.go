//go:build linux

package runnerstate

// injectFlockError makes every flock(2) fail with errno until restore is
// called.
func injectFlockError(errno error) (restore func()) {
	old := flockSyscall
	flockSyscall = func(fd, how int) error { return errno }
	return func() { flockSyscall = old }
}
