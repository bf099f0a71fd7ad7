//go:build linux

package runnerstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"golang.org/x/sys/unix"
)

// The helper of the fault-injection matrix (stress_faults_linux_test.go): one
// process, one operation, one injected fault.

func init() { registerRole("fault", roleFault) }

// envFaultOp names the operation a fault helper performs.
const envFaultOp = "RUNNERSTATE_TEST_FAULT_OP"

// faultState is what a fault helper's setup leaves for its operation, and
// what the operation leaves for the report.
type faultState struct {
	root    string // the cell's directory
	release func() // a hold the setup or the operation took
	pid     int    // ClearStale's answer
	cleared bool
}

// faultResult is what a fault helper reports once its operation returned,
// while it still lives.
type faultResult struct {
	Err         string `json:"err,omitempty"`
	Errno       string `json:"errno,omitempty"` // the first syscall.Errno in the error's chain, by name
	ErrnoNum    int    `json:"errno_num,omitempty"`
	Busy        bool   `json:"busy,omitempty"`
	Ctx         bool   `json:"ctx,omitempty"` // wraps the context's error
	NotHolder   bool   `json:"not_holder,omitempty"`
	NotDurable  bool   `json:"not_durable,omitempty"`
	Unsupported bool   `json:"unsupported,omitempty"`
	SyncRunning bool   `json:"sync_running,omitempty"`
	SyncUnknown bool   `json:"sync_unknown,omitempty"`
	Holds       bool   `json:"holds,omitempty"` // this process believes it holds the runner dir
	PID         int    `json:"pid,omitempty"`   // ClearStale's pid
	Cleared     bool   `json:"cleared,omitempty"`
	Panic       string `json:"panic,omitempty"`
	Log         string `json:"log,omitempty"` // the package's warnings during the operation
}

// fault: set up the operation $RUNNERSTATE_TEST_FAULT_OP names in the cell
// directory arg, then start a goroutine locked to a thread of its own and
// say "ready <tid> <writer tag>": strace attaches to that one thread, whose
// system calls are the operation's alone, counted from the attach. Its
// temporary files are named by a counter (faultTempName), so that the parent
// can name every path the operation may touch. On "go" the thread
// runs the operation and ends (a locked goroutine that returns takes its
// thread with it); the helper says "done <faultResult JSON>" and lives on,
// its locks as the operation left them, until stdin closes.
func roleFault(root string) int {
	// Let strace, a sibling and not an ancestor, attach where Yama's
	// ptrace_scope 1 would refuse it. EINVAL without Yama: nothing to allow.
	unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0)
	quietChild()
	op, ok := faultOpByName(os.Getenv(envFaultOp))
	if !ok {
		say("error unknown op %q", os.Getenv(envFaultOp))
		return 2
	}
	var temps atomic.Int64
	durable.SetTempRandom(func() string { return faultTempName(int(temps.Add(1))) })
	st := &faultState{root: root}
	if op.setup != nil {
		if err := op.setup(st); err != nil {
			say("error setup %v", err)
			return 1
		}
	}
	// Info too: a file the protocol does without when it cannot be written
	// (a withdrawal from the gate, a ready mark) is said at Info.
	var log testharness.LogBuffer
	SetLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo})))
	tids := make(chan int)
	start := make(chan struct{})
	done := make(chan error, 1)
	var panicked any
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		tids <- unix.Gettid()
		<-start
		defer func() {
			if p := recover(); p != nil {
				panicked = p
				done <- errors.New("panic")
			}
		}()
		done <- op.run(st)
	}()
	say("ready %d %s", <-tids, durable.WriterTag())
	cmds := commands()
	if cmd := <-cmds; cmd != "go" {
		say("error expected go, got %q", cmd)
		return 1
	}
	close(start)
	err := <-done
	res := faultResult{PID: st.pid, Cleared: st.cleared, Log: log.String()}
	if panicked != nil {
		res.Panic = fmt.Sprint(panicked)
	} else if err != nil {
		res.Err = err.Error()
		var errno syscall.Errno
		if errors.As(err, &errno) {
			res.Errno, res.ErrnoNum = unix.ErrnoName(errno), int(errno)
		}
		res.Busy = errors.Is(err, ErrBusy)
		res.Ctx = errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
		res.NotHolder = errors.Is(err, ErrNotHolder)
		res.NotDurable = isNotDurable(err)
		res.Unsupported = errors.Is(err, ErrLockingUnsupported)
		res.SyncRunning = errors.Is(err, ErrSyncRunning)
		res.SyncUnknown = errors.Is(err, ErrSyncUnknown)
	}
	res.Holds = holdOf(root) != nil
	line, _ := json.Marshal(res)
	say("done %s", line)
	for range cmds {
	}
	return 0
}

// faultRun is one operation of the matrix as the helper performs it: setup
// runs before strace attaches, run on the traced thread.
type faultRun struct {
	setup func(st *faultState) error
	run   func(st *faultState) error
}

// The scope and data dirs of a cell's scope operations, and the state file
// names of its state operations.
func scopeDirOf(root string) string { return filepath.Join(root, "scope") }
func dataDirOf(root string) string  { return filepath.Join(root, "data") }

const (
	faultStateFile = "state"
	faultJournal   = "journal"
	faultOldName   = "old.name"
	faultNewName   = "new.name"
)

// faultRecord is the record a cell's runner publishes: spec names its
// generation (v1 acknowledged before the fault, v2 the one under it).
func faultRecord(spec string) Record { return Record{Specs: []string{spec}} }

// faultRuns are the operations, by name.
var faultRuns = map[string]faultRun{
	"acquire": {run: func(st *faultState) error {
		r, err := Acquire(st.root)
		st.release = r
		return err
	}},
	"takeover": {run: func(st *faultState) error {
		ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
		defer cancel()
		r, err := Takeover(ctx, st.root, TakeoverOptions{NoSignal: true})
		st.release = r
		return err
	}},
	"gate": {run: func(st *faultState) error {
		// An ended context: one try, with its registration in the
		// gate and its withdrawal, and nothing that waits on a clock.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r, err := Takeover(ctx, st.root, TakeoverOptions{NoSignal: true})
		if err == nil {
			st.release = r
		}
		return err
	}},
	"publish": {
		setup: func(st *faultState) error {
			r, err := Acquire(st.root)
			if err != nil {
				return err
			}
			st.release = r
			return Publish(st.root, faultRecord("v1"))
		},
		run: func(st *faultState) error { return Publish(st.root, faultRecord("v2")) },
	},
	"release": {
		setup: func(st *faultState) error {
			r, err := Acquire(st.root)
			if err != nil {
				return err
			}
			st.release = r
			if err := Publish(st.root, faultRecord("v1")); err != nil {
				return err
			}
			return RequestRestart(st.root, RestartDrain) // addressed to this runner: retired by release
		},
		run: func(st *faultState) error { st.release(); return nil },
	},
	"request":        {run: func(st *faultState) error { return RequestRestart(st.root, RestartNow) }},
	"request-weaker": {run: func(st *faultState) error { return RequestRestart(st.root, RestartDrain) }},
	"clearrestart":   {run: func(st *faultState) error { return ClearRestart(st.root) }},
	"clearstale": {run: func(st *faultState) error {
		var err error
		st.pid, st.cleared, err = ClearStale(st.root)
		return err
	}},
	"save": {run: func(st *faultState) error {
		return SaveLines(st.root, faultStateFile, []string{"new 1", "new 2", "new 3"})
	}},
	"append": {run: func(st *faultState) error { return AppendLine(st.root, faultJournal, "c") }},
	"migrate": {run: func(st *faultState) error {
		return MigrateFile(st.root, faultOldName, faultNewName)
	}},
	"migrate-exists": {run: func(st *faultState) error {
		return MigrateFile(st.root, faultOldName, faultNewName)
	}},
	"scope": {run: func(st *faultState) error {
		ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
		defer cancel()
		r, err := AcquireScope(ctx, scopeDirOf(st.root), dataDirOf(st.root))
		st.release = r
		return err
	}},
	"scope-release": {
		setup: func(st *faultState) error {
			r, err := AcquireScope(context.Background(), scopeDirOf(st.root), dataDirOf(st.root))
			st.release = r
			return err
		},
		run: func(st *faultState) error { st.release(); return nil },
	},
	"sync": {run: func(st *faultState) error {
		ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
		defer cancel()
		r, err := SyncRunning(ctx, st.root)
		st.release = r
		return err
	}},
	"reset": {run: func(st *faultState) error {
		r, err := NoSyncRunning(st.root)
		st.release = r
		return err
	}},
}

func faultOpByName(name string) (faultRun, bool) {
	r, ok := faultRuns[name]
	return r, ok
}

// faultTempName is the random part of a fault helper's n-th temporary file.
func faultTempName(n int) string { return fmt.Sprintf("%012x", n) }

// faultTemps bounds how many temporary files a fault helper makes in its
// life, setup included.
const faultTemps = 24

// faultDeadline bounds a helper's whole life in a cell: a hang is a failure
// of the cell, never of the run.
const faultDeadline = 30 * time.Second
