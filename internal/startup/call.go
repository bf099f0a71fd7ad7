package startup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/spawn"
)

// AttemptEnv names, in a started process's environment, the attempt that
// started it (its Seq): a hint for its logs and tests. This package takes
// it out of the environment when it is loaded (StartedAttempt keeps it), as
// spawn.TakeReadiness does the readiness variables.
const AttemptEnv = "RUNNERSTATE_START_ATTEMPT"

// Poll is how often a caller looks where nothing notifies it.
const Poll = 10 * time.Millisecond

// outcomeWait bounds how long a caller that saw the process of another
// process's attempt exit waits for that starter to record the exit status,
// while the starter lives.
const outcomeWait = 2 * time.Second

// ErrBusy is Protocol.TryLock's answer when another caller holds the lock.
var ErrBusy = errors.New("another caller holds the start lock")

// errAgain says a wait ended in a state the caller must look at again.
var errAgain = errors.New("look again")

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Protocol is what an attempt needs from the directory it starts a runner
// for, given by the caller that knows the directory's files and the shape
// of a runner's record R. Its errors are returned to the Call's caller as
// they are.
type Protocol[R any] interface {
	// Probe is the directory's runner now: its record, whether its lock is
	// held, and whether the holder is ready.
	Probe() (rec R, held, ready bool, err error)
	// Clone is a copy of rec that its receiver may change.
	Clone(rec R) R
	// StartedBy reports whether rec is the record of a's process.
	StartedBy(a Attempt, rec R) bool
	// PID is the pid rec names as the holder's.
	PID(rec R) int
	// Read reads the attempt record: ok false when there is none or it
	// cannot be read; an error when its path is unusable (a symlink, a
	// directory, another non-regular file).
	Read() (a Attempt, ok bool, err error)
	// Write replaces the attempt record; the caller holds the lock.
	Write(a Attempt) error
	// TryLock takes the lock that serialises attempts, without waiting:
	// ErrBusy when another caller holds it.
	TryLock() (release func(), err error)
	// Lock waits for that lock, for a bounded time of its own.
	Lock() (release func(), err error)
	// OpenLog opens the log a started process's output is appended to, and
	// returns its size now.
	OpenLog(path string) (*os.File, int64, error)
	// Started tells that the attempt's process pid was started, with its
	// output going to log.
	Started(pid int, log string)
	// NotRecorded tells that the attempt just started could not be recorded
	// (Write failed with err): other callers may not see it.
	NotRecorded(err error)
	// NotSettled tells that the exit of the attempt's process pid could not
	// be recorded.
	NotSettled(pid int, err error)
}

// Call is one caller's wish for a ready runner in a directory.
type Call[R any] struct {
	Dir      string // the directory as the caller named it
	Abs      string // its absolute path: attempts and looks are shared by it
	Protocol Protocol[R]
	Looks    *Looks[R]
	Cmd      *exec.Cmd    // what starts the runner
	Log      string       // where its stdout and stderr are appended when Cmd leaves them nil; "" for none
	Accept   func(R) bool // whether a ready runner will do
	Since    time.Time    // when the call began

	spawned bool // this call started Cmd: it never starts another
}

// Run returns the record of a ready runner that Accept accepts, starting
// Cmd when there is none and no attempt is in progress, and waiting on the
// attempt otherwise. Errors: a *Failure when the runner started, or whose
// start it waited for, did not become ready, or ctx ended first; otherwise
// the Protocol's errors.
func (c *Call[R]) Run(ctx context.Context) (R, error) {
	var zero R
	w := dirwatch.New(c.Dir)
	defer w.Close()
	woke := time.Now()
	for {
		// A ready runner, or an attempt in progress, is seen without the
		// lock, which only a caller about to start one needs: a crowd of
		// callers never queues on it, and sees a runner ready even while
		// the caller that started it still holds it.
		look := c.lookAfter(woke)
		if look.err != nil {
			return zero, look.err
		}
		if look.ready && c.Accept(look.rec) {
			return look.rec, nil
		}
		if a := look.att; look.haveAtt && a.InProgress() && !c.spawned && !(look.ready && c.Protocol.StartedBy(a, look.rec)) {
			rec, err := c.await(ctx, a)
			if err != errAgain {
				return rec, err
			}
			woke = time.Now()
			continue
		}
		// The lock busy: another caller is deciding or starting. Rather
		// than queue behind every other caller's probe, wait for what it
		// records (or look again in 10 ms), and take the attempt it made.
		release, err := c.Protocol.TryLock()
		if err == ErrBusy {
			if err := w.Wait(ctx, Poll, nil); err != nil {
				return zero, &Failure{ExitCode: -1, Err: fmt.Errorf("%w, waiting while another caller decided whether to start the runner (this call ran no command of its own)", err)}
			}
			woke = time.Now()
			continue
		}
		if err != nil {
			return zero, err
		}
		rec, err := c.locked(ctx, release)
		if err != errAgain {
			return rec, err
		}
	}
}

// locked decides, holding the lock (which it releases), what this call
// does: return the runner, wait for an attempt or a holder, or start Cmd.
func (c *Call[R]) locked(ctx context.Context, release func()) (R, error) {
	var zero R
	rec, held, ready, err := c.Protocol.Probe()
	if err != nil {
		release()
		return zero, err
	}
	if ready && c.Accept(rec) {
		release()
		return rec, nil
	}
	a, have, err := c.Protocol.Read()
	if err != nil {
		release()
		return zero, err
	}
	switch {
	case have && ready && c.Protocol.StartedBy(a, rec) && c.spawned:
		release()
		return zero, c.refused(a)
	case have && a.InProgress() && !(ready && c.Protocol.StartedBy(a, rec)):
		release()
		return c.await(ctx, a)
	case have && a.Failed && a.Ended.After(c.Since):
		// It failed while this call waited for the lock.
		release()
		return zero, a.Failure()
	case held && !ready:
		// Held, not ready, and nothing an attempt started: a runner being
		// admitted, or one that cannot be verified. Wait for it, start
		// nothing.
		release()
		return c.awaitHolder(ctx, c.Protocol.PID(rec))
	case c.spawned:
		release()
		return zero, &Failure{PID: a.Child.PID, ExitCode: -1, Log: a.Log, Err: errors.New("the runner this call started is gone, and no attempt is recorded for it")}
	}
	a, err = c.spawn(a.Seq + 1)
	release()
	if err != nil {
		return zero, err
	}
	return c.await(ctx, a)
}

// refused is the answer when Accept refused the runner this call started.
func (c *Call[R]) refused(a Attempt) error {
	return &Failure{PID: a.Child.PID, ExitCode: -1, Log: a.Log, Err: ErrRefused}
}

// spawn starts Cmd as attempt seq, holding the lock, and records it.
func (c *Call[R]) spawn(seq uint64) (Attempt, error) {
	a := Attempt{Seq: seq, By: liveness.Current(), Log: c.Log, Began: time.Now(), ExitCode: -1}
	var out *os.File
	if c.Log != "" {
		f, size, err := c.Protocol.OpenLog(c.Log)
		if err != nil {
			return a, err
		}
		defer f.Close()
		out, a.LogFrom = f, size
	}
	c.spawned = true
	ls := &local{}
	key := localKey{c.Abs, seq}
	started := make(chan struct{})
	env := []string{AttemptEnv + "=" + strconv.FormatUint(seq, 10)}
	p := c.Protocol
	child, err := spawn.Start(c.Cmd, env, out, c.Abs, func(ch *spawn.Child) {
		<-started
		settle(p, a, ls, ch)
		locals.Lock()
		delete(locals.m, key)
		locals.Unlock()
	})
	if err != nil {
		close(started)
		return a, &Failure{ExitCode: -1, Log: c.Log, Err: err}
	}
	ls.child = child
	a.Child = liveness.Identity{PID: child.PID}
	if id, err := liveness.Lookup(child.PID); err == nil {
		a.Child = id
	}
	locals.Lock()
	locals.m[key] = ls
	locals.Unlock()
	if err := p.Write(a); err != nil {
		p.NotRecorded(err)
	}
	close(started)
	p.Started(child.PID, c.Log)
	return a, nil
}

// settle records that attempt a's process exited: when, and, when it
// exited before it was ready, its exit status and log tail, for the
// callers that wait on it. Called by the reaper once the process has
// exited.
func settle[R any](p Protocol[R], a Attempt, ls *local, c *spawn.Child) {
	wasReady := ls.ready.Load()
	select {
	case <-c.Ready():
		wasReady = true
	default:
	}
	release, err := p.Lock()
	if errors.Is(err, fs.ErrNotExist) {
		return // the directory is gone, and its attempt with it
	}
	if err != nil {
		p.NotSettled(c.PID, err)
		return
	}
	defer release()
	cur, ok, _ := p.Read()
	if !ok || cur.Seq != a.Seq || cur.Failed || !cur.Ended.IsZero() {
		return
	}
	cur.Ended = time.Now()
	if !wasReady && !cur.Ready {
		cur.Failed, cur.ExitCode = true, c.ExitCode()
		if err := c.WaitErr(); err != nil {
			cur.Err = err.Error()
		} else {
			cur.Err = "exited before it was ready"
		}
		cur.LogTail = LogTail(cur.Log, cur.LogFrom)
	}
	if err := p.Write(cur); err != nil {
		p.NotSettled(c.PID, err)
	}
}

// exitFailure is the failure of attempt a, whose process exited before it
// was ready, as this process learned it.
func exitFailure(a Attempt, code int, err error) *Failure {
	if err == nil {
		err = errors.New("exited before it was ready")
	}
	return &Failure{PID: a.Child.PID, ExitCode: code, Log: a.Log, LogTail: LogTail(a.Log, a.LogFrom), Err: err}
}

// await waits on attempt a: until its process is ready (or another ready
// runner that Accept accepts appears), it exited first, or ctx ends.
// errAgain when the state changed under it (a newer attempt, or a ready
// process of a's that Accept refuses: the caller's own attempt replaces it).
func (c *Call[R]) await(ctx context.Context, a Attempt) (R, error) {
	var zero R
	local := localChild(c.Abs, a.Seq)
	exited, readyCh, stop := watchAttempt(ctx, a, local)
	defer stop()
	w := dirwatch.New(c.Dir)
	defer w.Close()
	poll := Poll
	if w.Changed() != nil {
		poll = w.Interval()
	}
	timer := time.NewTimer(poll)
	defer timer.Stop()
	var goneAt time.Time
	woke := time.Now()
	for {
		if rec, done, err := c.judge(c.lookAfter(woke), a, local); done {
			return rec, err
		}
		if !goneAt.IsZero() {
			switch {
			case local != nil:
				return zero, exitFailure(a, local.child.ExitCode(), local.child.WaitErr())
			case time.Since(goneAt) > outcomeWait || !verifiedAlive(a.By):
				return zero, exitFailure(a, -1, nil)
			}
		}
		timer.Reset(poll)
		select {
		case <-ctx.Done():
			return zero, c.ended(ctx, a)
		case <-w.Changed():
		case <-readyCh:
			readyCh = nil
		case <-exited:
			exited, goneAt, poll = nil, time.Now(), Poll
		case <-timer.C:
		}
		woke = time.Now()
	}
}

// watchAttempt gives what tells that a's process exited, and that it said
// it is ready (own only: the attempt this process started); stop ends the
// watch.
func watchAttempt(ctx context.Context, a Attempt, own *local) (exited, ready <-chan struct{}, stop func()) {
	if own != nil {
		return own.child.Exited(), own.child.Ready(), func() {}
	}
	if p, _, _ := liveness.Pin(a.Child); p != nil {
		ew := liveness.WatchExit(ctx, p, nil)
		return ew.Exited(), nil, ew.Stop
	}
	return closedChan, nil, func() {}
}

// judge is what a look l says of a wait on attempt a: done with a record
// or an error (errAgain: look at the directory again from the start), or
// not done, to wait on.
func (c *Call[R]) judge(l look[R], a Attempt, own *local) (rec R, done bool, err error) {
	var zero R
	rec, ready := l.rec, l.ready
	if l.err != nil {
		return zero, true, l.err
	}
	if ready && c.Protocol.StartedBy(a, rec) {
		if own != nil {
			own.ready.Store(true)
		}
		switch {
		case c.Accept(rec):
			return rec, true, nil
		case c.spawned:
			return zero, true, c.refused(a)
		}
		return zero, true, errAgain
	}
	if ready && c.Accept(rec) {
		return rec, true, nil
	}
	if cur, ok := l.att, l.haveAtt; ok && cur.Seq != a.Seq {
		return zero, true, errAgain
	} else if ok && cur.Failed {
		return zero, true, cur.Failure()
	} else if ok && (!cur.Ended.IsZero() || cur.Ready) {
		return zero, true, errAgain // it was ready, and has let go or exited since
	}
	return zero, false, nil
}

// ended is the failure of a wait on attempt a whose context ended first.
func (c *Call[R]) ended(ctx context.Context, a Attempt) *Failure {
	err := ctx.Err()
	if !c.spawned {
		// The caller's command never ran: say whose attempt it waited
		// for, and how to end it.
		err = fmt.Errorf("%w, waiting for the attempt pid %d made at %s (this call ran no command of its own; while that process lives and is not ready, every Start waits for it: stop pid %d to start another)",
			err, a.By.PID, a.Began.Format(time.RFC3339), a.Child.PID)
	}
	return &Failure{PID: a.Child.PID, ExitCode: -1, Log: a.Log, LogTail: LogTail(a.Log, a.LogFrom), Err: err}
}

// awaitHolder waits while the directory is held by a runner that is not
// ready and was not started by an attempt: until it is ready, the lock is
// free, an attempt appears, or ctx ends (a *Failure naming pid, the
// holder).
func (c *Call[R]) awaitHolder(ctx context.Context, pid int) (R, error) {
	var zero R
	w := dirwatch.New(c.Dir)
	defer w.Close()
	for {
		if err := w.Wait(ctx, Poll, nil); err != nil {
			return zero, &Failure{PID: pid, ExitCode: -1, Err: fmt.Errorf("%w, waiting for the runner that holds the directory, not ready or asked to restart, to be ready or to go (this call ran no command of its own)", err)}
		}
		_, held, ready, err := c.Protocol.Probe()
		if err != nil {
			return zero, err
		}
		if a, ok, _ := c.Protocol.Read(); ready || !held || (ok && a.Pending()) {
			return zero, errAgain
		}
	}
}
