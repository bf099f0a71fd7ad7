package liveness

import (
	"errors"
	"fmt"
)

// uidOf reads the effective uid from kern.proc.pid, in the same answer as
// the start time that proves the process is id.
func uidOf(id Identity) (int, error) {
	k, err := kinfo(id.PID)
	switch {
	case errors.Is(err, ErrNoProcess):
		return -1, fmt.Errorf("liveness: uid of %v: %w", id, ErrNotAlive)
	case err != nil:
		return -1, fmt.Errorf("liveness: uid of %v: %w", id, err)
	case k.Proc.P_stat == szomb || startMicros(k) != id.StartTicks:
		return -1, fmt.Errorf("liveness: uid of %v: the process has exited: %w", id, ErrNotAlive)
	}
	return int(k.Eproc.Ucred.Uid), nil
}
