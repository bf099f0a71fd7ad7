//go:build darwin

// This file is written against the documented darwin interfaces (sysctl
// kern.proc.pid, kern.bootsessionuuid, kill(2)) and checked from Linux with
// `GOOS=darwin go vet` and staticcheck; it has never been run on a Mac.

package liveness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shirou/gopsutil/v4/host"
	"golang.org/x/sys/unix"
)

// startIsBootRelative: darwin start identities are absolute (microseconds
// since the Unix epoch), so they identify a process even without a boot id.
const startIsBootRelative = false

// szomb is SZOMB from <sys/proc.h>: the p_stat of a zombie.
const szomb = 5

// hostFacts are this machine's facts, read once.
type hostFacts struct{ bootID, machine, hostname string }

var facts = sync.OnceValue(func() hostFacts {
	f := hostFacts{hostname: hostname()}
	f.bootID, _ = unix.Sysctl("kern.bootsessionuuid")
	// gopsutil reads IOPlatformUUID (it runs ioreg once).
	if raw, err := host.HostID(); err == nil {
		f.machine = hashMachine(raw)
	}
	return f
})

// kinfo returns the kernel's process record for pid. A pid the kernel does
// not know yields a short answer (EIO from x/sys); kill(pid, 0) then tells
// "no such process" from other failures.
func kinfo(pid int) (*unix.KinfoProc, error) {
	k, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err == nil && int(k.Proc.P_pid) == pid {
		return k, nil
	}
	if gone, _ := killExited(pid); gone {
		return nil, ErrNoProcess
	}
	if err == nil {
		err = fmt.Errorf("sysctl kern.proc.pid.%d answered for pid %d", pid, k.Proc.P_pid)
	}
	return nil, err
}

// startMicros is p_starttime in microseconds since the Unix epoch.
func startMicros(k *unix.KinfoProc) uint64 {
	t := k.Proc.P_starttime
	return uint64(t.Sec)*1e6 + uint64(t.Usec)
}

func lookup(pid int) (Identity, error) {
	probeHook(pid)
	return identityOf(pid)
}

func identityOf(pid int) (Identity, error) {
	k, err := kinfo(pid)
	if err != nil {
		if errors.Is(err, ErrNoProcess) {
			return Identity{}, fmt.Errorf("liveness: lookup pid %d: %w", pid, ErrNoProcess)
		}
		return Identity{}, fmt.Errorf("liveness: lookup pid %d: %w", pid, err)
	}
	if k.Proc.P_stat == szomb {
		return Identity{}, fmt.Errorf("liveness: lookup pid %d: zombie: %w", pid, ErrNoProcess)
	}
	f := facts()
	t := k.Proc.P_starttime
	return Identity{
		PID:        pid,
		StartTicks: startMicros(k),
		StartTime:  time.Unix(t.Sec, int64(t.Usec)*1000).UTC(),
		BootID:     f.bootID,
		Machine:    f.machine,
		Hostname:   f.hostname,
	}, nil
}

func pin(id Identity) (*Process, Verdict, string) {
	p := newProcess(id, &handle{})
	v, why := p.verify()
	if v == Alive && id.PID == os.Getpid() {
		v = Self
	}
	if v != Alive {
		return nil, v, why
	}
	return p, v, why
}

// handle: darwin has no pidfd, so the pin is only the identity; every action
// re-verifies it.
type handle struct{ closed atomic.Bool }

func (h *handle) close() error {
	h.closed.Store(true)
	return nil
}

func (p *Process) verify() (Verdict, string) {
	pid := p.id.PID
	if p.h.closed.Load() {
		return Unverifiable, "pin closed"
	}
	probeHook(pid)
	k, err := kinfo(pid)
	switch {
	case errors.Is(err, ErrNoProcess):
		return Dead, fmt.Sprintf("no process with pid %d (kill: ESRCH)", pid)
	case err != nil:
		return Unverifiable, err.Error()
	case k.Proc.P_stat == szomb:
		return Dead, fmt.Sprintf("pid %d is a zombie: exited, not yet reaped", pid)
	}
	if got := startMicros(k); got != p.id.StartTicks {
		return Stale, fmt.Sprintf("start time %d != %d recorded, in µs (pid reused)", got, p.id.StartTicks)
	}
	return Alive, fmt.Sprintf("start time %d µs matches", p.id.StartTicks)
}

func signalSupported(Signal) error { return nil }

// signal: verified just before; killVerified sends and verifies again.
func (p *Process) signal(sig Signal) error { return p.killVerified(sig) }

func (p *Process) exitedNow() bool {
	v, _ := p.Verify()
	return v == Dead || v == Stale
}

var errClosed = fmt.Errorf("liveness: pin closed: %w", os.ErrClosed)

func (p *Process) wait(ctx context.Context) error {
	return pollExit(ctx, func() (bool, error) {
		if p.h.closed.Load() {
			return false, errClosed
		}
		return p.exitedNow(), nil
	})
}
