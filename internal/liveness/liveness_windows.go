//go:build windows

// This file is written against the documented Win32 interfaces (OpenProcess,
// GetProcessTimes, GetExitCodeProcess, WaitForSingleObject,
// TerminateProcess), checked from Linux with `GOOS=windows go vet` and
// staticcheck, and run in CI under Wine 8 (.ci/windows/run.sh), through the
// portable tests of this package and of the root package's re-executed
// children; never on Windows itself.

package liveness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/shirou/gopsutil/v4/host"
	"golang.org/x/sys/windows"
)

// startIsBootRelative: the creation time is an absolute FILETIME, so it
// identifies a process without a boot id (windows has none here).
const startIsBootRelative = false

// stillActive is STILL_ACTIVE (STATUS_PENDING), the exit code of a running
// process. A process may also exit with 259, so a wait on the handle has
// the last word.
const stillActive = 259

const (
	queryAccess = windows.PROCESS_QUERY_LIMITED_INFORMATION | windows.SYNCHRONIZE
	pinAccess   = queryAccess | windows.PROCESS_TERMINATE
)

// hostFacts are this machine's facts, read once; Windows has no boot id.
type hostFacts struct{ bootID, machine, hostname string }

var facts = sync.OnceValue(func() hostFacts {
	f := hostFacts{hostname: hostname()}
	// gopsutil reads the MachineGuid from the registry.
	if raw, err := host.HostID(); err == nil {
		f.machine = hashMachine(raw)
	}
	return f
})

// open returns a handle on pid with access, or ErrNoProcess when there is no
// such process (ERROR_INVALID_PARAMETER).
func open(pid int, access uint32) (windows.Handle, error) {
	h, err := windows.OpenProcess(access, false, uint32(pid))
	if errors.Is(err, windows.ERROR_INVALID_PARAMETER) {
		return 0, ErrNoProcess
	}
	return h, err
}

// facts of an open process handle: creation time (FILETIME as uint64) and
// whether it has exited.
func creation(h windows.Handle) (uint64, error) {
	var c, e, k, u windows.Filetime
	if err := windows.GetProcessTimes(h, &c, &e, &k, &u); err != nil {
		return 0, err
	}
	return uint64(c.HighDateTime)<<32 | uint64(c.LowDateTime), nil
}

func handleExited(h windows.Handle) (bool, error) {
	var code uint32
	if err := windows.GetExitCodeProcess(h, &code); err != nil {
		return false, err
	}
	if code != stillActive {
		return true, nil
	}
	r, err := windows.WaitForSingleObject(h, 0)
	if err != nil {
		return false, err
	}
	return r == windows.WAIT_OBJECT_0, nil
}

func lookup(pid int) (Identity, error) {
	probeHook(pid)
	return identityOf(pid)
}

func identityOf(pid int) (Identity, error) {
	h, err := open(pid, windows.PROCESS_QUERY_LIMITED_INFORMATION|windows.SYNCHRONIZE)
	if err != nil {
		return Identity{}, fmt.Errorf("liveness: lookup pid %d: %w", pid, err)
	}
	defer windows.CloseHandle(h)
	if gone, err := handleExited(h); err != nil {
		return Identity{}, fmt.Errorf("liveness: lookup pid %d: %w", pid, err)
	} else if gone {
		return Identity{}, fmt.Errorf("liveness: lookup pid %d: exited: %w", pid, ErrNoProcess)
	}
	c, err := creation(h)
	if err != nil {
		return Identity{}, fmt.Errorf("liveness: lookup pid %d: %w", pid, err)
	}
	f := facts()
	ft := windows.Filetime{HighDateTime: uint32(c >> 32), LowDateTime: uint32(c)}
	return Identity{
		PID:        pid,
		StartTicks: c,
		StartTime:  time.Unix(0, ft.Nanoseconds()).UTC(),
		Machine:    f.machine,
		Hostname:   f.hostname,
	}, nil
}

// pin opens the process (with terminate rights when granted) and verifies
// it through that handle. While the handle is open windows does not reuse
// the pid, so the handle is the pin.
func pin(id Identity) (*Process, Verdict, string) {
	pid := id.PID
	probeHook(pid)
	h, err := open(pid, pinAccess)
	if errors.Is(err, windows.ERROR_ACCESS_DENIED) {
		h, err = open(pid, queryAccess)
	}
	switch {
	case errors.Is(err, ErrNoProcess):
		return nil, Dead, fmt.Sprintf("no process with pid %d", pid)
	case errors.Is(err, windows.ERROR_ACCESS_DENIED):
		return nil, Unverifiable, fmt.Sprintf("pid %d exists but access is denied", pid)
	case err != nil:
		return nil, Unverifiable, fmt.Sprintf("OpenProcess(%d): %v", pid, err)
	}
	p := newProcess(id, &handle{h: h})
	v, why := p.verify()
	if v == Alive && pid == os.Getpid() {
		v = Self
	}
	if v != Alive {
		_ = p.Close()
		return nil, v, why
	}
	return p, v, why
}

// handle is the windows pin: an open process handle. mu keeps Close from
// closing it while another method uses it.
type handle struct {
	mu     sync.RWMutex
	h      windows.Handle
	closed bool
}

func (h *handle) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return windows.CloseHandle(h.h)
}

var errClosed = fmt.Errorf("liveness: pin closed: %w", os.ErrClosed)

// use runs fn with the open handle, or returns errClosed.
func (h *handle) use(fn func(windows.Handle) error) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return errClosed
	}
	return fn(h.h)
}

func (p *Process) verify() (Verdict, string) {
	pid := p.id.PID
	v, why := Unverifiable, ""
	err := p.h.use(func(h windows.Handle) error {
		gone, err := handleExited(h)
		if err != nil {
			return err
		}
		if gone {
			v, why = Dead, fmt.Sprintf("pid %d exited", pid)
			return nil
		}
		c, err := creation(h)
		if err != nil {
			return err
		}
		if c != p.id.StartTicks {
			v, why = Stale, fmt.Sprintf("creation time %d != %d recorded (pid reused)", c, p.id.StartTicks)
			return nil
		}
		v, why = Alive, fmt.Sprintf("creation time %d matches", c)
		return nil
	})
	if err != nil {
		return Unverifiable, err.Error()
	}
	return v, why
}

func signalSupported(sig Signal) error {
	if sig != SIGKILL {
		return fmt.Errorf("only SIGKILL (TerminateProcess) is available: %w", errors.ErrUnsupported)
	}
	return nil
}

// signal terminates the process through the pinned handle (exit code 1).
func (p *Process) signal(Signal) error {
	err := p.h.use(func(h windows.Handle) error { return windows.TerminateProcess(h, 1) })
	if err != nil {
		return fmt.Errorf("liveness: terminate pid %d: %w", p.id.PID, err)
	}
	return nil
}

func (p *Process) exitedNow() bool {
	var gone bool
	_ = p.h.use(func(h windows.Handle) (err error) {
		gone, err = handleExited(h)
		return err
	})
	return gone
}

// wait waits on the handle in 5 ms slices, so that ctx and Close are
// honoured; an exit ends the slice at once.
func (p *Process) wait(ctx context.Context) error {
	for {
		var done bool
		err := p.h.use(func(h windows.Handle) error {
			r, err := windows.WaitForSingleObject(h, 5)
			done = err == nil && r == windows.WAIT_OBJECT_0
			return err
		})
		if err != nil {
			return fmt.Errorf("liveness: wait pid %d: %w", p.id.PID, err)
		}
		if done {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
