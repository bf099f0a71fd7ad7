package runnerstate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// LingerName is the file a lingering server keeps in its runner directory.
const LingerName = "linger.json"

// LingerEndNow is Lingering.End when a newer server asks the lingering one
// to end at once.
const LingerEndNow = "now"

// Lingering is linger.json: a server that handed dir over and still serves
// the connections it had accepted (package daemon, Options.Linger). It is
// written by that server under the state lock before it lets the directory
// go, so that the admission of its successor does not wait for its exit;
// an older build ignores the file and waits as it always did.
type Lingering struct {
	Holder   Identity  `json:"holder"`             // the lingering process
	Since    time.Time `json:"since"`              // when it stepped down
	Deadline time.Time `json:"deadline"`           // Since + Linger: it closes what it still serves
	KillAt   time.Time `json:"kill_at"`            // Deadline + LingerGrace: after it, killed if alive
	Open     int       `json:"open"`               // connections it still serves (updated at most 1/s)
	End      string    `json:"end,omitempty"`      // LingerEndNow: asked to end at once
	Retaking bool      `json:"retaking,omitempty"` // its successor failed; it takes dir back (Dial waits)
}

// ErrLingering reports that another server lingers in the directory:
// WriteLingering refuses a second one (at most one lingers at a time).
var ErrLingering = errors.New("runnerstate: another server lingers in the directory")

// gone reports whether the process l names is provably gone: its pid names
// no process, a zombie, or another process (Dead, Stale). A process that
// cannot be verified (another PID namespace, say) is not.
func (l Lingering) gone() bool {
	v, _ := liveness.Check(liveness.Identity(l.Holder))
	return v == liveness.Dead || v == liveness.Stale
}

// parseLingering parses linger.json: a JSON object naming a valid pid.
func parseLingering(data []byte) (Lingering, error) {
	var l Lingering
	if err := durable.DecodeObject(data, &l); err != nil {
		return Lingering{}, err
	}
	if !liveness.ValidPID(l.Holder.PID) {
		return Lingering{}, fmt.Errorf("names no valid pid (pid %d)", l.Holder.PID)
	}
	return l, nil
}

// readLingeringState reads linger.json (bounded, never following a
// symlink; a file another user owns is absent).
func readLingeringState(dir string) (Lingering, fileState, error) {
	return readState(filepath.Join(dir, LingerName), parseLingering)
}

// ReadLingering reads dir's linger.json: ok is false when it is absent, or
// owned by another user (it proves nothing, and binds nobody). A file that
// cannot be read or parsed is an error naming its path. It takes no lock
// and writes nothing.
func ReadLingering(dir string) (Lingering, bool, error) {
	l, state, err := readLingeringState(dir)
	if state == fileCorrupt {
		return Lingering{}, false, err
	}
	return l, state == fileOK, nil
}

// lingeringForWrite is linger.json for a writer under the state lock: ok
// when it names a process; an error when it is there but cannot be read
// (what it says is unknown). One that does not parse is none: the writer
// replaces it.
func lingeringForWrite(dir string) (Lingering, bool, error) {
	l, state, err := readLingeringState(dir)
	switch {
	case state == fileCorrupt && unreadable(err):
		return Lingering{}, false, err
	case state == fileCorrupt:
		infoOnce("linger:"+err.Error(), "runnerstate: ignoring a lingering record that cannot be parsed", "path", filepath.Join(dir, LingerName), "err", err)
	}
	return l, state == fileOK, nil
}

// WriteLingering writes l as dir's linger.json, under the state lock, with
// l.Holder set to this process. It is refused with an error matching
// ErrLingering when linger.json names another process that is not provably
// gone (at most one server lingers per directory). A record naming this
// process is rewritten, keeping End when it was set; one naming a provably
// gone process, or one that does not parse, is replaced. A holder's first
// record (its step-down) is refused with an error matching ErrBusy while a
// job it started (Inherit) holds its tree: its successor would take the
// job for an orphan. Written atomically without fsync (it describes a live
// process), 0644. ErrNewerProtocol (wrapped) when a state file of dir says
// a newer protocol.
func WriteLingering(dir string, l Lingering) error {
	if err := ownDir("WriteLingering", dir); err != nil {
		return err
	}
	if err := checkProtocol(dir, true); err != nil {
		return err
	}
	self := Self()
	l.Holder = self
	path := filepath.Join(dir, LingerName)
	return withStateLock(dir, func(stateHeld) error {
		old, ok, err := lingeringForWrite(dir)
		if err != nil {
			return err
		}
		mine := ok && sameProcess(old.Holder, self)
		switch {
		case mine:
			if l.End == "" {
				l.End = old.End
			}
		case ok && !old.gone():
			return fmt.Errorf("%w: %s names pid %d, which lingers until %s (killed after %s); ask it to end (EndLingering) and wait for its exit",
				ErrLingering, path, old.Holder.PID, old.Deadline.Format(time.RFC3339), old.KillAt.Format(time.RFC3339))
		}
		if !mine && holdOf(dir) != nil {
			// A step-down: never while a job it started holds its tree,
			// which its successor would take for an orphan and signal.
			if jobs, _ := orphans(dir, self.PID); len(jobs) > 0 {
				return fmt.Errorf("%w: %s: pid %d, a job of this runner, holds its tree (%s): a runner with jobs does not linger",
					ErrBusy, dir, jobs[0], filepath.Join(dir, treeLockName))
			}
		}
		data, err := protocolLine(l)
		if err != nil {
			return errorf("write %s: %w", path, err)
		}
		return public(durable.WriteVolatileToAll(dir, LingerName, data))
	})
}

// RemoveLingering removes dir's linger.json, under the state lock, only
// when it names this process. Absent (or dir absent): nil.
func RemoveLingering(dir string) error {
	if _, err := os.Stat(dir); isNotExist(err) {
		return nil
	}
	self := Self()
	return withStateLock(dir, func(held stateHeld) error {
		return removeLingeringOf(held, self)
	})
}

// removeLingeringOf removes linger.json when it names id. Called under the
// state lock.
func removeLingeringOf(held stateHeld, id Identity) error {
	l, state, _ := readLingeringState(held.dir)
	if state != fileOK || !sameProcess(l.Holder, id) {
		return nil
	}
	return public(durable.Remove(held.dir, LingerName))
}

// EndLingering asks the server lingering in dir to end at once, under the
// state lock: when linger.json names another process that is not provably
// gone, it sets End to LingerEndNow and returns the record (ok true). The
// record of a provably gone process is removed (ok false); so is nothing
// else. Errors: a linger.json that cannot be read, ErrNewerProtocol
// (wrapped), or the state lock's.
func EndLingering(dir string) (Lingering, bool, error) {
	if err := ownDir("EndLingering", dir); err != nil {
		return Lingering{}, false, err
	}
	if _, err := os.Stat(dir); isNotExist(err) {
		return Lingering{}, false, nil
	}
	if err := checkProtocol(dir, true); err != nil {
		return Lingering{}, false, err
	}
	var out Lingering
	var ok bool
	err := withStateLock(dir, func(held stateHeld) error {
		l, found, err := lingeringForWrite(dir)
		switch {
		case err != nil || !found || sameProcess(l.Holder, Self()):
			return err
		case l.gone():
			return removeLingeringOf(held, l.Holder)
		}
		out, ok = l, true
		if l.End == LingerEndNow {
			return nil
		}
		out.End = LingerEndNow
		data, err := protocolLine(out)
		if err != nil {
			return err
		}
		return public(durable.WriteVolatileToAll(dir, LingerName, data))
	})
	if err != nil {
		return Lingering{}, false, err
	}
	return out, ok, nil
}

// Retake is the admission of a lingering server taking its directory back
// after its successor failed: one that asks nobody. It takes runner.lock
// and tree.lock without waiting (a *BusyError naming the holder when
// either is held), then, under the state lock, is refused with an error
// matching ErrBusy that names the starter when the gate lists a live
// waiting one (it never goes ahead of a starter). Otherwise it is admitted
// as Takeover admits, without joining the gate: its identity stamped, the
// previous holder's record cleared and the restart request that made it
// leave retired, the gate's handover address cleared; linger.json is
// removed, and rec is published with Ready true (no leaving mark). Only
// for a process whose own linger.json names it: otherwise an error.
// release is as Acquire's.
func Retake(dir string, rec Record) (release func(), err error) {
	if err := ownDir("Retake", dir); err != nil {
		return nil, err
	}
	self := Self()
	path := filepath.Join(dir, LingerName)
	l, ok, err := ReadLingering(dir)
	if err != nil {
		return nil, err
	}
	if !ok || !sameProcess(l.Holder, self) {
		return nil, errorf("retake %s: %s does not name this process: only a lingering server takes its directory back", dir, path)
	}
	if holdOf(dir) != nil {
		return nil, busyError(filepath.Join(dir, LockName), nil, inspectRunnerLock)
	}
	if err := checkProtocol(dir, true); err != nil {
		return nil, err
	}
	since := time.Now()
	p, err := tryPair(dir)
	switch {
	case err == errTreeBusy:
		return nil, treeBusyError(dir, nil)
	case err != nil:
		return nil, err
	}
	h, err := newHold(dir, p, self)
	if err != nil {
		p.release()
		return nil, err
	}
	err = withStateLock(dir, func(held stateHeld) error {
		return updateGateLocked(held, func(g *gateState) error {
			for _, e := range g.Waiting {
				if e.Live() {
					return fmt.Errorf("%w: %s: starter pid %d waits for it (since %s): a lingering server does not take it back ahead of a starter",
						ErrBusy, dir, e.Starter.PID, e.Since.Format(time.RFC3339))
				}
			}
			g.Escalation = nil
			g.Handover = ""
			if err := stamp(h); err != nil {
				return err
			}
			settleIn(held, self, since)
			return removeLingeringOf(held, self)
		})
	})
	if err != nil {
		p.release()
		return nil, err
	}
	h.Describe(rec.Program, rec.Version)
	holds.Add(h)
	rec.Ready = true
	if _, err := publishAs(dir, rec); err != nil && !errors.Is(err, ErrNotDurable) {
		h.Release()
		return nil, err
	}
	notifyReady(dir)
	return h.Release, nil
}

// reapWait bounds how long ReapLingering waits for a process it killed to
// exit before it removes its record.
const reapWait = 2 * time.Second

// ReapLingering is a holder's (and an admission's) care of a lingering
// server in dir: it removes linger.json when the process it names is
// provably gone, and sends SIGKILL (verified and pinned, as a takeover
// signals) to one still alive after its KillAt, then removes its record
// once it has exited. It returns the KillAt still ahead (zero when none),
// so that the holder can call again then. A record without KillAt, or
// naming a process that cannot be verified, is never signalled. Failures
// are logged.
func ReapLingering(dir string) (next time.Time) {
	l, state, _ := readLingeringState(dir)
	if state != fileOK || sameProcess(l.Holder, Self()) {
		return time.Time{}
	}
	if !l.gone() {
		if l.KillAt.IsZero() {
			return time.Time{}
		}
		if now := time.Now(); now.Before(l.KillAt) {
			return l.KillAt
		}
		if !killLingering(dir, l) {
			return time.Time{}
		}
	}
	err := withStateLock(dir, func(held stateHeld) error {
		// Under the lock: the record may have changed since the look.
		cur, state, _ := readLingeringState(dir)
		if state != fileOK || !sameProcess(cur.Holder, l.Holder) || !cur.gone() {
			return nil
		}
		return removeLingeringOf(held, l.Holder)
	})
	if err != nil {
		logger().Info("runnerstate: could not remove the record of a lingering server that is gone", "path", filepath.Join(dir, LingerName), "err", err)
	}
	return time.Time{}
}

// killLingering sends SIGKILL to the lingering process l names, pinned
// and verified, and waits up to reapWait for its exit: whether it exited.
func killLingering(dir string, l Lingering) bool {
	path := filepath.Join(dir, LingerName)
	p, v, why := liveness.Pin(liveness.Identity(l.Holder))
	if p == nil {
		infoOnce(fmt.Sprintf("linger-unverified:%s:%d", dir, l.Holder.PID), "runnerstate: a lingering server outlived its kill_at but cannot be verified; it is not signalled",
			"path", path, "pid", l.Holder.PID, "verdict", v.String(), "why", why)
		return v == liveness.Dead || v == liveness.Stale
	}
	defer p.Close()
	if err := p.Signal(liveness.SIGKILL); err != nil {
		logger().Warn("runnerstate: could not signal a lingering server that outlived its kill_at", "path", path, "pid", l.Holder.PID, "err", err)
		return false
	}
	logger().Warn("runnerstate: killed a lingering server that outlived its kill_at", "path", path, "pid", l.Holder.PID, "kill_at", l.KillAt)
	ctx, cancel := context.WithTimeout(context.Background(), reapWait)
	defer cancel()
	return p.Wait(ctx) == nil
}

// lingeringStatus is Status's Lingering: the record of linger.json while
// its process is not provably gone, and warnings for one that cannot be
// read or that outlived its kill_at.
func lingeringStatus(dir string, warnings []string) (*Lingering, []string) {
	l, state, err := readLingeringState(dir)
	switch {
	case state == fileCorrupt:
		return nil, append(warnings, fmt.Sprintf("%v; it is ignored, and the next lingering server replaces it", err))
	case state != fileOK || l.gone():
		return nil, warnings
	}
	if !l.KillAt.IsZero() && time.Now().After(l.KillAt) {
		warnings = append(warnings, fmt.Sprintf("%s: the lingering server, pid %d, outlived its kill_at (%s); the next holder or admission kills it",
			filepath.Join(dir, LingerName), l.Holder.PID, l.KillAt.Format(time.RFC3339)))
	}
	return &l, warnings
}
