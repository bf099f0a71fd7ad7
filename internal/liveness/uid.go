package liveness

import "fmt"

// UID returns the effective uid of the process id names, read from the
// kernel. The caller vouches that id was verified alive before the call (a
// holder Running just confirmed): on Linux the Uid line of
// /proc/<pid>/status is read first and the start identity of the pid after
// it, and a process alive before the read and still there after it was
// there throughout, so the uid read is its own (the argument of
// [CheckHolder]); on darwin kern.proc.pid's credentials come in the same
// answer as the start time.
//
// Errors: an error wrapping [ErrNotAlive] when the process has exited (its
// pid is free, a zombie's or another process's); another when it cannot be
// verified here (hidden /proc, another machine or namespace); one wrapping
// errors.ErrUnsupported where the kernel's credentials of another process
// are not read (windows, other systems).
func UID(id Identity) (int, error) {
	if v, why, done := precheck(id, Current()); done {
		return -1, fmt.Errorf("liveness: uid of %v: cannot be read: %v (%s)", id, v, why)
	}
	return uidOf(id)
}
