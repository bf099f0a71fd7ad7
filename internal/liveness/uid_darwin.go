package liveness

import "fmt"

// uid reads the effective uid from kern.proc.pid, in the same answer as the
// start time that proves the process is the pinned one.
func (p *Process) uid() (int, error) {
	k, err := kinfo(p.id.PID)
	switch {
	case err != nil:
		return -1, fmt.Errorf("liveness: uid of %v: %w", p.id, err)
	case k.Proc.P_stat == szomb || startMicros(k) != p.id.StartTicks:
		return -1, fmt.Errorf("liveness: uid of %v: the process has exited: %w", p.id, ErrNotAlive)
	}
	return int(k.Eproc.Ucred.Uid), nil
}
