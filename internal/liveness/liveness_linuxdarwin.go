//go:build linux || darwin

package liveness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// killVerified sends sig with kill(2) to a process verified just before, and
// verifies it again afterwards, so that a pid recycled in between is at least
// reported. It is the signal of the paths without a pidfd.
func (p *Process) killVerified(sig Signal) error {
	pid := p.id.PID
	if err := unix.Kill(pid, sig); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("liveness: signal %v to pid %d: exited first: %w", sig, pid, ErrNotAlive)
		}
		return fmt.Errorf("liveness: signal %v to pid %d: %w", sig, pid, err)
	}
	if v, why := p.Verify(); v != Alive && v != Dead {
		return fmt.Errorf("liveness: signalled pid %d with %v, but afterwards it is %s (%s): the signal may have reached a process that reused the pid", pid, sig, v, why)
	}
	return nil
}

// killExited asks kill(pid, 0) whether anything holds pid: ESRCH means
// nothing does; success and EPERM both mean something does (EPERM is never
// taken as death). It proves nothing about which process that is.
func killExited(pid int) (bool, error) {
	switch err := unix.Kill(pid, 0); {
	case err == nil, errors.Is(err, unix.EPERM):
		return false, nil
	case errors.Is(err, unix.ESRCH):
		return true, nil
	default:
		return false, fmt.Errorf("kill(%d, 0): %w", pid, err)
	}
}

// pollExit polls exited every 5 ms until it reports true (nil) or ctx ends
// (ctx.Err()). It is the wait of the paths that have nothing to block on.
func pollExit(ctx context.Context, exited func() (bool, error)) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		done, err := exited()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
