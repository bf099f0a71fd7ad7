package liveness

import (
	"fmt"
	"os"
)

// UID returns the effective uid of the process id names, read from the
// kernel while that very process is pinned: on Linux the Uid line of
// /proc/<pid>/status, read under the pin (a pidfd) and verified again after
// the read; on darwin kern.proc.pid's credentials, in the same answer as the
// start time that identifies the process. This process's own identity
// answers os.Geteuid.
//
// Errors: an error wrapping [ErrNotAlive] when the process has exited (its
// verdict is [Dead] or [Stale]); another when it cannot be verified here
// (hidden /proc, another namespace); one wrapping errors.ErrUnsupported
// where the kernel's per-process credentials are not read (windows, other
// systems).
func UID(id Identity) (int, error) {
	p, v, why := Pin(id)
	switch {
	case p == nil && v == Self:
		return os.Geteuid(), nil
	case p == nil && (v == Dead || v == Stale):
		return -1, fmt.Errorf("liveness: uid of %v: %v (%s): %w", id, v, why, ErrNotAlive)
	case p == nil:
		return -1, fmt.Errorf("liveness: uid of %v: cannot be read: %v (%s)", id, v, why)
	}
	defer p.Close()
	return p.uid()
}
