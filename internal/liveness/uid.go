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
// Errors: an error wrapping [ErrNotAlive] when id is not verified alive
// here; one wrapping errors.ErrUnsupported where the kernel's per-process
// credentials are not read (windows, other systems).
func UID(id Identity) (int, error) {
	p, v, why := Pin(id)
	if p == nil {
		if v == Self {
			return os.Geteuid(), nil
		}
		return -1, fmt.Errorf("liveness: uid of %v: %v (%s): %w", id, v, why, ErrNotAlive)
	}
	defer p.Close()
	return p.uid()
}
