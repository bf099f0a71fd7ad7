package runnerstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
)

// ErrSuperseded is Takeover's answer to a starter when a newer starter came
// for the same directory: the newest starter wins, and the others step aside.
var ErrSuperseded = errors.New("runnerstate: a newer starter took over this runner directory")

// TakeoverOptions says how Takeover asks, and then makes, a live runner give
// the directory up. The zero value is the defaults.
type TakeoverOptions struct {
	// Mode is the restart request left for the live runner first:
	// RestartNow (the default) or RestartDrain.
	Mode string
	// Grace is how long the runner has to stop by itself after the first
	// request of this takeover, before SIGTERM. Default 5s.
	Grace time.Duration
	// KillAfter is how long after SIGTERM before SIGKILL, and how long an
	// admitted starter waits for the previous runner's process to exit.
	// Default 5s.
	KillAfter time.Duration
	// NoSignal never signals the runner: only the cooperative request is
	// left, and the wait ends with ctx.
	NoSignal bool
	// Logger receives the takeover's steps; nil means the package's logger
	// (SetLogger).
	Logger *slog.Logger
}

// Default TakeoverOptions.
const (
	DefaultGrace     = 5 * time.Second
	DefaultKillAfter = 5 * time.Second
)

func (o TakeoverOptions) withDefaults() TakeoverOptions {
	if o.Mode == "" {
		o.Mode = RestartNow
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.KillAfter <= 0 {
		o.KillAfter = DefaultKillAfter
	}
	if o.Logger == nil {
		o.Logger = logger()
	}
	return o
}

// Takeover admits this process as the one runner of dir on this machine,
// taking the directory over from a live runner when there is one, and returns
// the release func of its hold (as Acquire's).
//
//   - No live runner: admitted at once. A stale record and restart request are
//     cleared and logged.
//   - A verified local runner holds the lock: a restart request (opts.Mode) is
//     left for it; after Grace, counted from the first request of this
//     takeover (so a stream of newer starters cannot postpone it), it gets
//     SIGTERM, and after KillAfter more, SIGKILL. Each signal goes through a
//     pidfd that pins the process, after its identity is verified again, and
//     each step is taken once however many starters come. The starter is
//     admitted only once the kernel lock is its own and its record published
//     (Publish may be called again to fill it in), so two runners never
//     overlap. Once the lock is its own, and before it writes its identity
//     into runner.lock, it waits, at most KillAfter, for the previous
//     runner's process to exit.
//   - A holder that cannot be verified (another machine or PID namespace, a
//     record with no start identity, no record at all), or any holder when
//     opts.NoSignal is set: never signalled. The request is left, and the wait
//     ends with ctx.
//   - Concurrent starters: exactly one is admitted, the newest (by a sequence
//     number the starters share, not the wall clock); the others return
//     ErrSuperseded. A waiting starter shows in Status's Waiting. A starter
//     that died is pruned and never blocks the others.
//   - A starter is signalled only once it is admitted. While it holds the
//     kernel lock but is still being admitted (waiting for the previous
//     runner's process to exit), its identity is not yet in runner.lock, so
//     no other starter can verify it, and none signals it; a newer starter
//     that comes meanwhile leaves its request and waits, and the admitting
//     starter, no longer the newest, lets go and returns ErrSuperseded.
//
// When ctx ends first, Takeover returns promptly with a *BusyError naming the
// holder and wrapping ctx's error; it withdraws its waiting mark, and its own
// restart request when the runner has not acted on it and no other starter
// waits. The context works as for Lock: a ctx already ended gets one attempt
// (admitted only when no runner holds dir, and nothing is asked or
// signalled), and a ctx that ends while Takeover works never ends in an
// admission: a hold taken at that instant is released at once, and the
// answer is the *BusyError wrapping ctx.Err(). ctx can still end the instant
// after Takeover returns, so a runner that cancels ctx on SIGTERM looks at
// its own stop cause after a successful return too (examples/runner does).
//
// Errors: ErrBadMode for a bad opts.Mode; ErrSuperseded; a *BusyError when ctx
// ends; otherwise the errors of Acquire. Touches runner.lock, runner.json,
// restart.json and gate.json.
func Takeover(ctx context.Context, dir string, opts TakeoverOptions) (release func(), err error) {
	if err := checkDir("Takeover", dir); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if strength(opts.Mode) == 0 {
		return nil, fmt.Errorf("%w, not %q", ErrBadMode, opts.Mode)
	}
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	if heldBy(dir) != nil {
		// This process is the runner already: there is nobody to take over
		// from, and waiting on itself would only end with ctx.
		return nil, busyError(filepath.Join(dir, LockName), nil)
	}
	live := ctx.Err() == nil
	t := &takeover{dir: dir, lockPath: filepath.Join(dir, LockName), opts: opts, start: time.Now(), self: Self(), log: opts.Logger}
	createPrivate(t.lockPath)
	if err := t.register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, t.busy(ctx.Err())
		}
		return nil, err
	}
	h, err := t.run(ctx, live)
	if err != nil {
		t.withdraw()
		return nil, err
	}
	return h.release, nil
}

// takeover is one starter's attempt.
type takeover struct {
	dir, lockPath string
	opts          TakeoverOptions
	start         time.Time
	self          Identity
	log           *slog.Logger
	seq           uint64
	request       *restartRequest   // the restart request this starter wrote, if any
	pinned        *liveness.Process // the verified holder being taken over
}

// register takes the next sequence number and enters the waiting list.
func (t *takeover) register(ctx context.Context) error {
	return updateGate(ctx, t.dir, func(g *gateState) error {
		t.seq = g.next()
		g.Waiting = append(g.Waiting, gateEntry{Seq: t.seq, Starter: t.self, Since: t.start})
		return nil
	})
}

// withdraw leaves the waiting list and takes back this starter's restart
// request if it is still pending as written and no other starter waits.
func (t *takeover) withdraw() {
	if t.pinned != nil {
		t.pinned.Close()
		t.pinned = nil
	}
	// Withdrawing must happen even when the caller's context has ended; the
	// state lock's own bound keeps it finite.
	err := updateGate(context.Background(), t.dir, func(g *gateState) error {
		g.remove(t.seq)
		if len(g.Waiting) > 0 || t.request == nil {
			return nil
		}
		g.Attempt = nil
		if req, ok := readRestart(t.dir); ok && sameRequest(req, *t.request) && req.By.Instance == t.self.Instance {
			if err := removeState(t.dir, RestartName); err != nil {
				return err
			}
			t.log.Info("runnerstate: takeover withdrew its restart request", "dir", t.dir, "mode", req.Mode)
		}
		return nil
	})
	if err != nil {
		t.log.Warn("runnerstate: takeover could not withdraw from the gate", "dir", t.dir, "err", err)
	}
}

// run is the takeover loop: try the lock; when busy, ask, escalate and wait
// for the lock, a newer starter, or the next escalation step.
func (t *takeover) run(ctx context.Context, live bool) (*holder, error) {
	// A newer starter arriving cancels the wait at once.
	supCtx, cancelSup := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		w := newDirWatcher(t.dir)
		defer w.close()
		for w.wait(supCtx, 0, nil) == nil {
			if g, _ := readGate(t.dir); g.newerThan(t.seq) {
				cancelSup()
				return
			}
		}
	}()
	defer func() { cancelSup(); <-watchDone }()

	for {
		if g, _ := readGate(t.dir); g.newerThan(t.seq) {
			return nil, ErrSuperseded
		}
		l, err := acquireNB(t.lockPath, kindExclusive)
		if err == errWouldBlock && ctx.Err() != nil {
			// An ended context gets its one attempt, never a request or a
			// signal.
			return nil, t.busy(ctx.Err())
		}
		if err == errWouldBlock {
			var next time.Time
			next, err = t.step(ctx)
			if ctx.Err() != nil {
				return nil, t.busy(ctx.Err())
			}
			if err == errNotNewest {
				return nil, ErrSuperseded
			}
			if err != nil {
				return nil, err
			}
			waitCtx, cancel := context.WithDeadline(supCtx, next)
			l, err = acquireWait(waitCtx, t.lockPath, kindExclusive)
			cancel()
			if err != nil && errors.Is(err, ErrBusy) {
				if ctx.Err() != nil {
					return nil, t.busy(ctx.Err())
				}
				continue // a step is due, or a newer starter came: look again
			}
		}
		if err != nil {
			return nil, err
		}
		// The kernel lock is ours, but the previous runner's process may
		// still be finishing its exit. Wait for it before writing this
		// starter's identity: until then no other starter can verify, and so
		// signal, this one; a newer starter that comes meanwhile supersedes
		// it at admission.
		t.awaitPrevious(ctx)
		if err := keepIfLive(ctx, live, t.lockPath, l.release); err != nil {
			return nil, err
		}
		h, err := t.admit(ctx, l)
		if err == errNotNewest {
			return nil, ErrSuperseded
		}
		if err != nil && ctx.Err() != nil {
			return nil, t.busy(ctx.Err())
		}
		if err != nil {
			return nil, err
		}
		if err := keepIfLive(ctx, live, t.lockPath, h.release); err != nil {
			return nil, err
		}
		return h, nil
	}
}

var errNotNewest = errors.New("not the newest starter")

// busy describes the holder for a starter whose context ended.
func (t *takeover) busy(cause error) error {
	return busyError(t.lockPath, cause)
}

// step looks at the holder, leaves or upgrades the restart request, sends the
// signal that is due, and returns when the next step is due.
func (t *takeover) step(ctx context.Context) (time.Time, error) {
	now := time.Now()
	next := now.Add(notifySafetyInterval)
	st := inspectRunner(t.dir)
	if st.err != nil {
		return next, st.err
	}
	if !st.held {
		return now, nil // released between our attempt and our look: try again at once
	}
	canSignal := !t.opts.NoSignal && st.verified && st.verdict == liveness.Alive
	if canSignal && (t.pinned == nil || t.pinned.PID() != st.content.PID) {
		if t.pinned != nil {
			t.pinned.Close()
		}
		p, v, why := liveness.Pin(liveness.Identity(st.content))
		t.pinned = p
		if p == nil {
			canSignal = false
			t.log.Debug("runnerstate: takeover could not pin the holder", "dir", t.dir, "pid", st.content.PID, "verdict", v.String(), "why", why)
		}
	}
	if !canSignal && st.held && (t.opts.NoSignal || !st.verified) {
		warnOnce(fmt.Sprintf("takeover-unverified:%s:%d:%s", t.dir, st.pid, st.content.Instance),
			"runnerstate: takeover will not signal the holder; it leaves a restart request and waits", "dir", t.dir, "pid", st.pid, "why", st.reason, "no_signal", t.opts.NoSignal)
	}
	var sendTerm, sendKill bool
	err := updateGate(ctx, t.dir, func(g *gateState) error {
		// Admissions happen under this same lock: a starter that is no longer
		// the newest must not ask (or signal) the runner just admitted.
		if g.newerThan(t.seq) {
			return errNotNewest
		}
		a := g.Attempt
		need := false
		if a == nil || a.For != st.content.Instance || a.PID != st.pid {
			a = &gateAttempt{For: st.content.Instance, PID: st.pid, Mode: t.opts.Mode, FirstRequestAt: now}
			g.Attempt = a
			need = true
		} else if strength(t.opts.Mode) > strength(a.Mode) {
			a.Mode = t.opts.Mode
			need = true
		}
		if need {
			req, wrote, err := requestRestartLocked(t.dir, a.Mode, t.self, true)
			if err != nil {
				return err
			}
			if wrote {
				t.request = &req
				t.log.Info("runnerstate: takeover asked the runner to restart", "dir", t.dir, "pid", st.pid, "mode", a.Mode)
			}
		}
		if !canSignal {
			return nil
		}
		termDue := a.FirstRequestAt.Add(t.opts.Grace)
		switch {
		case a.TermAt.IsZero() && !now.Before(termDue):
			a.TermAt, sendTerm = now, true
			next = now.Add(t.opts.KillAfter)
		case a.TermAt.IsZero():
			next = termDue
		case a.KillAt.IsZero() && !now.Before(a.TermAt.Add(t.opts.KillAfter)):
			a.KillAt, sendKill = now, true
		case a.KillAt.IsZero():
			next = a.TermAt.Add(t.opts.KillAfter)
		}
		return nil
	})
	if err != nil {
		return next, err
	}
	if next.Before(now.Add(time.Millisecond)) {
		next = now.Add(time.Millisecond)
	}
	if next.After(now.Add(notifySafetyInterval)) {
		next = now.Add(notifySafetyInterval)
	}
	switch {
	case sendTerm:
		t.signal(syscall.SIGTERM, "the grace period ended")
	case sendKill:
		t.signal(syscall.SIGKILL, "it outlived SIGTERM by the kill-after period")
	}
	return next, ctx.Err()
}

// signal sends sig to the pinned holder, which re-verifies it first.
func (t *takeover) signal(sig syscall.Signal, why string) {
	if t.pinned == nil {
		return
	}
	// The step was decided from a look taken before the gate update, which
	// may have waited for the state lock: the runner may have let go since.
	// Where the kernel lists lock holders, signal only a pinned process it
	// still names as the holder. (The kernel has no "signal if it holds the
	// lock"; what is left is the microseconds between this look and the
	// signal, against a process that is verified and pinned.)
	if locks, _, known := kernelLocks(t.lockPath); known && !holdsExclusive(locks, t.pinned.PID()) {
		t.log.Info("runnerstate: takeover did not signal the runner: it released the directory", "dir", t.dir, "pid", t.pinned.PID(), "signal", sig.String())
		return
	}
	err := t.pinned.Signal(sig)
	args := []any{"dir", t.dir, "pid", t.pinned.PID(), "signal", sig.String(), "why", why}
	if err != nil {
		t.log.Warn("runnerstate: takeover did not signal the runner", append(args, "err", err)...)
		return
	}
	t.log.Warn("runnerstate: takeover signalled the runner", args...)
}

// admit makes this starter the runner, holding l: if it is still the newest
// starter, it leaves the gate, writes its identity, clears what the previous
// runner left and publishes its record. Otherwise it lets l go and returns
// errNotNewest.
func (t *takeover) admit(ctx context.Context, l *lockFile) (*holder, error) {
	key, err := keyOf(t.dir)
	if err != nil {
		l.release()
		return nil, err
	}
	h := &holder{dir: t.dir, key: key, lock: l, self: t.self, acquiredAt: time.Now()}
	newest := true
	err = withStateLockCtx(ctx, t.dir, func() error {
		return updateGateLocked(t.dir, func(g *gateState) error {
			if g.newerThan(t.seq) {
				newest = false
				return nil
			}
			g.remove(t.seq)
			g.Admitted = t.seq
			g.Attempt = nil
			line, err := jsonLine(t.self)
			if err != nil {
				return err
			}
			if err := l.writeContent(line); err != nil {
				return err
			}
			clearStaleRecord(t.dir, t.self)
			retireRestart(t.dir, t.self, t.start)
			return nil
		})
	})
	if err != nil || !newest {
		l.release()
		if err == nil {
			err = errNotNewest
		}
		return nil, err
	}
	t.request = nil // retired with the previous runner
	h.register()
	if err := Publish(t.dir, Record{}); err != nil {
		h.release()
		return nil, err
	}
	return h, nil
}

// awaitPrevious waits, at most KillAfter and never past ctx, for the previous
// runner's process to exit: it released the lock, but may still be finishing
// its exit. The starter goes on to its admission either way.
func (t *takeover) awaitPrevious(ctx context.Context) {
	p := t.pinned
	if p == nil {
		return
	}
	t.pinned = nil
	defer p.Close()
	wctx, cancel := context.WithTimeout(ctx, t.opts.KillAfter)
	defer cancel()
	if err := p.Wait(wctx); err != nil && ctx.Err() == nil {
		t.log.Warn("runnerstate: the previous runner released the directory but has not exited", "dir", t.dir, "pid", p.PID(), "waited", t.opts.KillAfter)
	}
}

// StandbyOptions configures Standby. The zero value is the defaults.
type StandbyOptions struct {
	// Interval is how often WorkIsComplete is asked. Default 1s. The owner's
	// exit is noticed at once whatever the interval.
	Interval time.Duration
	// WorkIsComplete, when set, ends the standby with WorkCompleted as soon as
	// it returns true (the owner did the work this process stood by for).
	WorkIsComplete func() bool
	// Logger receives the one line naming the owner; nil means the package's
	// logger (SetLogger).
	Logger *slog.Logger
}

// StandbyResult is how a standby ended.
type StandbyResult struct {
	Resumed          bool // the owner is gone: this process may take the directory
	PreviousOwnerPID int  // the owner's pid, when one was seen
	WorkCompleted    bool // WorkIsComplete returned true
}

// Standby waits while another live runner owns dir, for a process that may
// borrow the runner's work (a CLI that would run a job itself when no runner
// does). It logs once which pid owns dir, then returns Resumed, with that pid,
// as soon as the owner is gone (the kernel lock is free: it released, or it
// died), or WorkCompleted when opts.WorkIsComplete says so. With no owner at
// all it returns Resumed at once. It never takes the lock: take it with
// Acquire or Takeover after a Resumed.
//
// It wakes within milliseconds of the owner's exit: through the owner's pidfd
// and inotify on Linux, elsewhere by polling every 20 ms.
//
// Errors: when ctx ends first, a *BusyError naming the owner and wrapping
// ctx's error; an error naming the path when runner.lock is a symlink or a
// directory.
func Standby(ctx context.Context, dir string, opts StandbyOptions) (StandbyResult, error) {
	if err := checkDir("Standby", dir); err != nil {
		return StandbyResult{}, err
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	log := opts.Logger
	if log == nil {
		log = logger()
	}
	lockPath := filepath.Join(dir, LockName)
	var res StandbyResult
	w := newDirWatcher(dir)
	defer w.close()
	// exited is signalled when the pinned owner's process exits.
	exited := make(chan struct{}, 1)
	var owner *exitWatch
	defer func() { owner.stop() }()
	nextCheck := time.Now()
	for {
		st := inspectRunner(dir)
		if st.err != nil {
			return res, st.err
		}
		if !st.held {
			res.Resumed = true
			return res, nil
		}
		if st.pid != res.PreviousOwnerPID {
			res.PreviousOwnerPID = st.pid
			log.Info("runnerstate: standing by while another runner owns the directory", "dir", dir, "pid", st.pid, "verified", st.verified)
		}
		if st.verified && st.verdict == liveness.Alive && (owner == nil || owner.p.PID() != st.pid) {
			owner.stop()
			owner = nil
			if p, _, _ := liveness.Pin(liveness.Identity(st.content)); p != nil {
				owner = watchExit(ctx, p, exited)
			}
		}
		var max time.Duration
		if opts.WorkIsComplete != nil {
			if !time.Now().Before(nextCheck) {
				if opts.WorkIsComplete() {
					res.WorkCompleted = true
					return res, nil
				}
				nextCheck = time.Now().Add(opts.Interval)
			}
			max = time.Until(nextCheck)
		}
		if err := w.wait(ctx, max, exited); err != nil {
			return res, busyError(lockPath, err)
		}
	}
}

// exitWatch waits for a pinned process's exit beside a loop, and signals
// exited when it comes.
type exitWatch struct {
	p      *liveness.Process
	cancel context.CancelFunc
	done   chan struct{}
}

func watchExit(ctx context.Context, p *liveness.Process, exited chan<- struct{}) *exitWatch {
	ctx, cancel := context.WithCancel(ctx)
	e := &exitWatch{p: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		if p.Wait(ctx) == nil {
			select {
			case exited <- struct{}{}:
			default:
			}
		}
	}()
	return e
}

// stop ends the wait and unpins the process; nil is a no-op.
func (e *exitWatch) stop() {
	if e == nil {
		return
	}
	e.cancel()
	<-e.done
	e.p.Close()
}
