//go:build darwin || windows

package liveness

import "os"

// currentIdentity reads this process's own identity. It does not go through
// lookup: knowing oneself is not a probe of a recorded pid, so the probe hook
// is not called (as on Linux). When the system will not say, it is the pid
// and the machine's facts alone.
func currentIdentity() Identity {
	id, err := identityOf(os.Getpid())
	if err != nil {
		f := facts()
		return Identity{PID: os.Getpid(), BootID: f.bootID, Machine: f.machine, Hostname: f.hostname}
	}
	return id
}
