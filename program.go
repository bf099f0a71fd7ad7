package runnerstate

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/runnerstate/runnerstate/internal/version"
)

// ErrOtherProgram reports a directory held by a runner of another program:
// the verified holder's record names a Program other than the caller's
// (both non-empty). It is returned wrapped in an error that also matches
// ErrBusy and names both programs; nothing was asked, signalled or written.
var ErrOtherProgram = errors.New("runnerstate: the directory is held by a runner of another program")

// yieldTo is the step-aside answer of a starter that yields (package
// daemon's, for a server a client started) when the holder of dir (one
// that is not leaving), or a live starter waiting for it, runs the same
// Program at the same or a newer Version: a client's copy never bounces a
// deploy, of its own version or a newer one. nil otherwise, and always when
// either version cannot be compared. Called under the state lock, with g
// the gate.
func (t *takeover) yieldTo(g *gateState) error {
	if !t.starter.Yield || t.opts.Program == "" || t.opts.Version == "" {
		return nil
	}
	notOlder := func(program, v string) bool {
		cmp, ok := version.Compare(v, t.opts.Version)
		return program == t.opts.Program && ok && cmp >= 0
	}
	// The holder as the kernel names it: a record whose process is dying
	// (killed, its lock already dropped) is no server to yield to.
	if rec, held, _ := Running(t.dir); held && rec.Process.PID != 0 && rec.Leaving == "" && notOlder(rec.Program, rec.Version) {
		t.yielded = &yieldError{dir: t.dir, program: rec.Program, version: rec.Version, pid: rec.PID, holds: true}
		return t.yielded
	}
	for _, e := range g.Waiting {
		if e.Seq != t.seq && notOlder(e.Program, e.Version) && e.Live() {
			t.yielded = &yieldError{dir: t.dir, program: e.Program, version: e.Version, pid: e.Starter.PID}
			return t.yielded
		}
	}
	return nil
}

// yieldError is the answer of a starter that stepped aside for a newer
// server of its program (or one of its own version): it matches
// ErrSuperseded.
type yieldError struct {
	dir, program, version string
	pid                   int
	holds                 bool // the newer server holds dir (else it waits for it)
}

func (e *yieldError) Error() string {
	where := "is taking it over"
	if e.holds {
		where = "holds it"
	}
	return fmt.Sprintf("runnerstate: %s: stepped aside for a newer server (or a deploy of its own version): %s %s (pid %d) %s", e.dir, e.program, e.version, e.pid, where)
}

// Is reports true for ErrSuperseded.
func (e *yieldError) Is(target error) bool { return target == ErrSuperseded }

// checkProgram refuses dir when its verified holder's record names another
// program than program (both non-empty), with an error matching both
// ErrOtherProgram and ErrBusy; nil when either is empty or the holder has
// no record yet.
func checkProgram(dir, program string) error {
	if program == "" {
		return nil
	}
	rec, held, err := Running(dir)
	if err != nil || !held {
		return nil // Running's own errors are the caller's next step's to report
	}
	return otherProgram(dir, rec, program)
}

// otherProgram is checkProgram's refusal for rec, the record of dir's
// verified holder.
func otherProgram(dir string, rec Record, program string) error {
	if program == "" || rec.Program == "" || rec.Program == program {
		return nil
	}
	be := &BusyError{Path: filepath.Join(dir, LockName), PID: rec.PID, Verified: true}
	return fmt.Errorf("%w: %s is held by %q (pid %d), not %q: %w", ErrOtherProgram, dir, rec.Program, rec.PID, program, be)
}
