package filelock

// StillHolds reports whether pid still holds the lock of path as far as
// the kernel tells: exactly from the process's own descriptors when they
// can be read (HeldBy), else from the kernel's lock list (HoldsExclusive);
// true where the kernel tells nothing (whatever verified pid before is
// then all there is).
func StillHolds(path string, pid int) bool {
	if ino, err := InodeOf(path); err == nil {
		switch HeldBy(pid, ino) {
		case Yes:
			return true
		case No:
			return false
		}
	}
	holds, known := HoldsExclusive(path, pid)
	return holds || !known
}
