//go:build !linux

package locktable

// Holders: only Linux lists lock holders (/proc/locks). Elsewhere known is
// false and callers probe with filelock.ProbeHeld instead, which is why a
// caller retries a busy answer briefly on these systems.
func Holders(path string) (holders []Holder, exists, known bool) {
	return nil, true, false
}

// ListsHolders is false: only Linux lists lock holders.
func ListsHolders() bool { return false }

// HoldersOf: see Holders.
func HoldersOf(Inode) (holders []Holder, known bool) { return nil, false }
