package runnerstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/runnerstate/runnerstate/internal/bridge"
	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/hold"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/lockholder"
	"github.com/runnerstate/runnerstate/internal/locktable"
)

// ErrSuperseded is Takeover's answer to a starter when a newer starter came
// for the same directory: the newest starter wins, and the others step aside.
var ErrSuperseded = errors.New("runnerstate: a newer starter took over the runner directory")

// TakeoverOptions says how Takeover asks, and then makes, a live runner give
// the directory up. The zero value is the defaults; with no Logger here nor
// SetLogger, a takeover logs only its warnings, to slog.Default().
type TakeoverOptions struct {
	// Mode is the restart request left for the live runner first:
	// RestartNow (the default) or RestartDrain.
	Mode string
	// Grace is how long the runner has to stop by itself after the first
	// request of this takeover, before SIGTERM. Zero means DefaultGrace
	// (5s) with RestartNow; with RestartDrain, zero waits for the drain
	// (the runner's own exit) until ctx ends, and never signals it. A
	// Grace that is set escalates after it in either mode.
	Grace time.Duration
	// KillAfter is how long after SIGTERM before SIGKILL, and how long an
	// admitted starter waits for the previous runner's process to exit.
	// Default 5s.
	KillAfter time.Duration
	// NoSignal never signals the runner: only the cooperative request is
	// left, and the wait ends with ctx.
	NoSignal bool
	// Logger receives the takeover's steps: at Info, the restart request it
	// left, a holder it will not signal (not verified, or NoSignal), SIGTERM
	// after Grace, an orphan signalled, a withdrawal; at Warn, SIGKILL (the
	// runner outlived SIGTERM by KillAfter), a signal that failed, a previous
	// runner that let go but has not exited, descriptors it could not read.
	// nil means the package's logger (SetLogger), which by default passes on
	// the warnings only, to slog.Default().
	Logger *slog.Logger
	// Program names what this starter will run (for example "idxd"). When
	// set, a directory whose verified holder's record names another Program
	// is refused with ErrOtherProgram, before anything is asked, signalled or
	// written; it is recorded with the starter while it waits and in the
	// record written at admission. Empty: no check.
	Program string
	// Version is this starter's build version, recorded with it while it
	// waits and in the record written at admission. The root package never
	// compares versions (package daemon does).
	Version string
}

// Default TakeoverOptions.
const (
	DefaultGrace     = 5 * time.Second
	DefaultKillAfter = 5 * time.Second
)

// withDefaults fills in Mode, KillAfter and Logger. Grace is left as given:
// the grace of each step is graceFor's decision.
func (o TakeoverOptions) withDefaults() TakeoverOptions {
	if o.Mode == "" {
		o.Mode = RestartNow
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
// taking the directory over from a live runner when there is one, and
// returns the release func of its hold (as Acquire's). The sequence is
// docs/protocol.md#takeover; the promises are in docs/guarantees.md.
//
//   - No live runner: admitted at once; a stale record and restart request
//     are cleared and logged.
//   - A verified local runner: a restart request (opts.Mode) is left for
//     it, then SIGTERM after Grace and SIGKILL after KillAfter (see
//     TakeoverOptions), each through a pidfd after its identity is verified
//     again, and each once however many starters come. A holder that
//     cannot be verified, or any with opts.NoSignal, is only asked.
//   - Concurrent starters: exactly one is admitted, the newest; the others
//     return ErrSuperseded. A starter that died never blocks the others.
//   - Admitted only once the kernel lock is its own, the previous runner's
//     process has exited, lingers (linger.json) or outlived KillAfter, and its record is published
//     with Ready false (Publish fills it in); a starter is never signalled
//     before it is admitted.
//
// ctx works as for Lock: one that has ended gets one try (nothing is asked
// or signalled), and one that ends while Takeover works never ends in an
// admission. A runner that cancels ctx on SIGTERM looks at its own stop
// cause after a successful return too (examples/runner does).
//
// Errors: ErrBadMode; ErrOtherProgram (matching ErrBusy too), before
// anything is asked or written; ErrSuperseded, wrapped with dir and the
// newer starter's pid; when ctx ends, a *BusyError naming the holder and
// wrapping ctx's error, once it has withdrawn from the gate; ErrNewerProtocol
// (wrapped); otherwise the errors of Acquire, or of gate.json, naming it.
// Touches runner.lock, runner.json, restart.json, gate.json, linger.json (ReapLingering; start.json: Acquire).
func Takeover(ctx context.Context, dir string, opts TakeoverOptions) (release func(), err error) {
	if err := ownDir("Takeover", dir); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if ModeStrength(opts.Mode) == 0 {
		return nil, fmt.Errorf("%w, not %q", ErrBadMode, opts.Mode)
	}
	if err := ensureRunnerDir(dir); err != nil {
		return nil, err
	}
	if err := checkProtocol(dir, true); err != nil {
		return nil, err // before the gate: registering would rewrite gate.json
	}
	if holdOf(dir) != nil {
		// This process is the runner already: there is nobody to take over
		// from, and waiting on itself would only end with ctx.
		return nil, busyError(filepath.Join(dir, LockName), nil, inspectRunnerLock)
	}
	if err := checkProgram(dir, opts.Program); err != nil {
		return nil, err
	}
	t := &takeover{dir: dir, lockPath: filepath.Join(dir, LockName), opts: opts, start: time.Now(), self: Self(), log: opts.Logger, live: ctx.Err() == nil, starter: bridge.StarterOf(ctx)}
	if err := t.register(ctx); err != nil {
		t.steppedAside(err)
		if ctx.Err() != nil && (errors.Is(err, ErrBusy) || errors.Is(err, ctx.Err())) {
			return nil, t.busy(ctx.Err()) // the wait for the state lock ended with ctx
		}
		return nil, err // gate.json could not be written: that is the answer, whatever ctx says
	}
	h, err := t.run(ctx)
	if err != nil {
		t.withdraw()
		t.steppedAside(err)
		return nil, err
	}
	return h.Release, nil
}

// steppedAside records, when this starter stepped aside for a newer server
// or was superseded by a newer starter (err, ErrSuperseded) and a Start
// attempt started this process for dir, that its end is no failure
// (markAside): the backoff does not count it. A superseded starter ran
// nothing of its own: its end says nothing of its build.
func (t *takeover) steppedAside(err error) {
	if t.yielded == nil && !errors.Is(err, ErrSuperseded) {
		return
	}
	if err := markAside(t.dir); err != nil {
		t.log.Info("runnerstate: could not record in the start attempt that this process stepped aside", "dir", t.dir, "err", err)
	}
}

// takeover is one Takeover call, from joining the gate to admission or
// giving up: its place in the gate, the restart request it left, and the
// holder it pinned to signal.
type takeover struct {
	dir, lockPath string
	opts          TakeoverOptions
	start         time.Time
	self          Identity
	log           *slog.Logger
	seq           uint64
	live          bool              // ctx had not ended when it began (keepIfLive)
	request       *restartRequest   // the restart request this starter wrote, if any
	replaced      *restartRequest   // the operator's request that request upgraded, if any
	pinned        *liveness.Process // the verified holder being taken over (pin)
	pinnedID      liveness.Identity // the identity pinned
	starter       bridge.Starter    // what package daemon said of this starter
	yielded       error             // the step-aside answer, once the gate decided it
}

// register takes the next sequence number and enters the waiting list; a
// starter that yields steps aside instead when a newer server of its
// program holds dir or waits for it.
func (t *takeover) register(ctx context.Context) error {
	return updateGate(ctx, t.dir, func(g *gateState) error {
		if err := t.yieldTo(g); err != nil {
			return err
		}
		t.seq = g.JoinAs(gate.Entry{Starter: liveness.Identity(t.self), Since: t.start,
			Program: t.opts.Program, Version: t.opts.Version, Rendezvous: t.starter.Rendezvous, Linger: t.starter.Linger})
		return nil
	})
}

// errNotNewest says a newer starter came (or was admitted): this one steps
// aside with ErrSuperseded.
var errNotNewest = errors.New("not the newest starter")

// errLost is admit's answer when a lock file of the pair was deleted or
// replaced before the admission completed: that pair guards nothing, and
// run takes the files at their paths again.
var errLost = errors.New("a lock file was lost during admission")

// maxLost bounds how often run takes the pair again after admission lost
// it: each time means somebody deletes lock files as fast as they are
// taken.
const maxLost = 16

// run waits until the pair is this starter's (takePair), waits for the
// previous runner's process to exit (awaitPrevious), and enters; it takes
// the pair again when admission lost it, at most maxLost times.
func (t *takeover) run(ctx context.Context) (*hold.Hold, error) {
	supCtx, stop := t.untilNewer(ctx)
	defer stop()
	for lost := 0; ; lost++ {
		p, err := t.takePair(ctx, supCtx)
		if err != nil {
			return nil, err
		}
		t.awaitPrevious(ctx)
		h, err := t.enter(ctx, p)
		if err == errLost && lost < maxLost {
			continue
		}
		if err == errLost {
			return nil, fmt.Errorf("runnerstate: %s: its lock files were deleted or replaced %d times while being taken; stop whatever removes them", t.dir, lost+1)
		}
		return h, err
	}
}

// untilNewer returns a context that ends with ctx or as soon as a newer starter
// registers, so that a wait for the lock ends at once then; stop ends the
// watch.
func (t *takeover) untilNewer(ctx context.Context) (context.Context, func()) {
	return dirwatch.Until(ctx, t.dir, func() bool {
		g, _ := readGate(t.dir)
		return g.NewerThan(t.seq)
	})
}

// heldLock is what a try of the pair found held.
type heldLock uint8

const (
	pairFree       heldLock = iota // both locks were taken
	runnerLockHeld                 // runner.lock is held
	treeLockHeld                   // runner.lock was free, tree.lock held
)

// takePair tries the pair of locks and, while it is busy, takes the next
// step against whoever holds it (step) and waits until that step is due,
// the lock is free, a newer starter comes (supCtx, from untilNewer, ends), or
// ctx ends. An ended ctx gets its one try, never a request or a signal.
func (t *takeover) takePair(ctx, supCtx context.Context) (pair, error) {
	for {
		if g, _ := readGate(t.dir); g.NewerThan(t.seq) {
			return pair{}, t.superseded()
		}
		p, held, err := t.try()
		switch {
		case err != nil:
			return pair{}, err
		case held == pairFree:
			return p, nil
		case ctx.Err() != nil:
			return pair{}, t.busy(ctx.Err())
		}
		next, err := t.step(ctx, held)
		switch {
		case ctx.Err() != nil:
			return pair{}, t.busy(ctx.Err())
		case err == errNotNewest:
			return pair{}, t.superseded()
		case err != nil:
			return pair{}, err
		}
		waitCtx, cancel := context.WithDeadline(supCtx, next)
		free, err := t.awaitFree(waitCtx, held)
		cancel()
		switch {
		case free:
			// Free now (let go again): take the pair in its order.
		case err != nil:
			return pair{}, err
		case ctx.Err() != nil:
			return pair{}, t.busy(ctx.Err())
		}
		// A step is due, the lock was free, or a newer starter came: look
		// again.
	}
}

// try takes the pair of locks without waiting (tryPair): held is what it
// found busy, runner.lock or only tree.lock.
func (t *takeover) try() (pair, heldLock, error) {
	p, err := tryPair(t.dir)
	var be *BusyError
	switch {
	case err == nil:
		return p, pairFree, nil
	case err == errTreeBusy:
		return p, treeLockHeld, nil
	case errors.As(err, &be):
		return p, runnerLockHeld, nil
	}
	return p, pairFree, err
}

// awaitFree waits for runner.lock, or for tree.lock when only that is
// held, and lets it go at once: free, or ctx ended (not free, no error).
func (t *takeover) awaitFree(ctx context.Context, held heldLock) (bool, error) {
	path, inspect := t.lockPath, inspector(inspectRunnerLock)
	if held == treeLockHeld {
		path, inspect = filepath.Join(t.dir, treeLockName), inspectLock
	}
	l, err := waitLock(ctx, path, filelock.Exclusive, 0o600, inspect)
	switch {
	case err == nil:
		l.Release()
		return true, nil
	case errors.Is(err, ErrBusy):
		return false, nil
	}
	return false, err
}

// step takes the step against what held names: the escalation is recorded,
// the request left, the due signal sent; it returns when the wait looks
// again (nextLook).
func (t *takeover) step(ctx context.Context, held heldLock) (time.Time, error) {
	now := time.Now()
	at, ok, err := t.target(held)
	if err != nil || !ok {
		// Released, or changed, since the try: try again at once.
		return now, err
	}
	// A holder is signalled only through a pin, taken (or kept) now, before
	// the gate is asked what is due; orphans are pinned one by one as they
	// are signalled.
	canSignal := at.signal == treeHolders
	if at.signal == pinnedHolder {
		canSignal = t.pin(at.holder)
	}
	due, next, err := t.decide(ctx, now, at, canSignal)
	if err != nil {
		return now, err
	}
	switch {
	case due == 0:
	case at.signal == pinnedHolder:
		t.signal(due, at.lock)
	case at.signal == treeHolders:
		t.signalOrphans(due, at.lock)
	}
	return nextLook(now, next), nil
}

// whom is who a due signal goes to.
type whom uint8

const (
	askOnly      whom = iota // never signalled: the step only asks
	pinnedHolder             // stepTarget.holder, pinned, while it holds stepTarget.lock
	treeHolders              // every process that holds stepTarget.lock now (orphans), each pinned and checked
)

// stepTarget is what one step is against, as target reads the directory.
type stepTarget struct {
	key    string            // names the escalation in the gate: the holder's instance, or "tree:orphans"
	pid    int               // the holder's pid, when one is named
	grace  time.Duration     // before SIGTERM, from the escalation's first request (graceFor)
	ask    bool              // leave or upgrade a restart request (ask), under the state lock
	signal whom              // who a due signal goes to
	holder liveness.Identity // for pinnedHolder: the process to pin
	lock   string            // the lock file the signalled process must still hold
}

// target is what a step against held is against; ok is false when it
// changed since the try (try again at once). While runner.lock is held: its
// holder, which is asked to restart, and signalled only when it is verified
// alive and signals are allowed (a holder that cannot be verified, or any
// with NoSignal, is told once that it is only asked). While only tree.lock
// is held: a runner whose runner.lock was lost (tree.lock names it, and it
// holds tree.lock through the descriptor it recorded), signalled as a
// verified runner is, without a request; otherwise the orphans of a runner
// that is gone, each pinned and checked to still hold tree.lock before each
// signal. With NoSignal nothing is signalled. Each one's grace is
// graceFor's.
func (t *takeover) target(held heldLock) (at stepTarget, ok bool, err error) {
	st := inspectRunner(t.dir)
	occ := st.occupancy()
	if st.err != nil {
		return stepTarget{}, false, st.err
	}
	treePath := filepath.Join(t.dir, treeLockName)
	at = stepTarget{key: st.holder.Instance, pid: st.pid, grace: graceFor(t.opts, held, occ), lock: t.lockPath}
	switch {
	case held == runnerLockHeld && !occ.held(), held == treeLockHeld && occ != occLostFile && occ != occOrphans:
		return stepTarget{}, false, nil // it changed since the try: try again at once
	case held == runnerLockHeld:
		at.ask = true
		if !t.opts.NoSignal && occ.verified() && st.verdict == liveness.Alive {
			at.signal, at.holder = pinnedHolder, liveness.Identity(st.holder)
		} else if t.opts.NoSignal || !occ.verified() {
			infoOnceTo(t.log, fmt.Sprintf("takeover-unverified:%s:%d:%s", t.dir, st.pid, st.holder.Instance),
				"runnerstate: takeover will not signal the holder; it leaves a restart request and waits", "dir", t.dir, "pid", st.pid, "why", st.reason, "no_signal", t.opts.NoSignal)
		}
	case occ == occLostFile:
		at.lock = treePath
		if !t.opts.NoSignal && st.verdict == liveness.Alive {
			at.signal, at.holder = pinnedHolder, liveness.Identity(st.holder)
		}
	default: // orphans
		at = stepTarget{key: "tree:orphans", grace: at.grace, lock: treePath}
		if !t.opts.NoSignal {
			at.signal = treeHolders
		}
	}
	return at, true, nil
}

// decide records this step in the gate, under the state lock: the
// escalation (a new one when the holder changed), the restart request it
// asks for, and, when the holder may be signalled, the signal due now
// (escalate) and when the next step is due. A due signal is recorded as
// sent before it is sent, so that no other starter sends it again; one that
// then finds the holder gone, or fails, is logged, and not sent again. Admissions
// happen under this same lock, so a starter that is no longer the newest
// never asks or signals the holder just admitted: errNotNewest.
func (t *takeover) decide(ctx context.Context, now time.Time, at stepTarget, canSignal bool) (due liveness.Signal, next time.Time, err error) {
	err = withStateLockCtx(ctx, t.dir, func(held stateHeld) error {
		return updateGateLocked(held, func(g *gateState) error {
			if g.NewerThan(t.seq) {
				return errNotNewest
			}
			g.Against(at.key, at.pid, now)
			if at.ask {
				if err := t.ask(held, g, at.pid); err != nil {
					return err
				}
			}
			if !canSignal {
				return nil
			}
			due, next = escalate(*g.Escalation, now, at.grace, t.opts.KillAfter)
			g.Escalation.Sent(due, now)
			return nil
		})
	})
	return due, next, err
}

// ask leaves the restart request of the current escalation (in the gate),
// or upgrades its mode. Called under the state lock (held).
func (t *takeover) ask(held stateHeld, g *gateState, pid int) error {
	e := g.Escalation
	if ModeStrength(t.opts.Mode) <= ModeStrength(e.Mode) {
		return nil // asked already, as strongly
	}
	e.Mode = t.opts.Mode
	prior, hadPrior, _ := pendingForWrite(t.dir)
	req, wrote, err := requestRestartLocked(held, e.Mode, t.self, true)
	if err != nil {
		return err
	}
	if wrote {
		t.request, t.replaced = &req, nil
		if hadPrior && !prior.Takeover && prior.For == req.For {
			t.replaced = &prior // an operator's weaker request, put back on withdrawal
		}
		t.log.Info("runnerstate: takeover asked the runner to restart", "dir", t.dir, "pid", pid, "mode", e.Mode)
	}
	return nil
}

// pin pins the holder id to signal it, keeping a pin already taken of the
// same process, and reports whether it is pinned.
func (t *takeover) pin(id liveness.Identity) bool {
	if t.pinned != nil && t.pinned.PID() == id.PID {
		return true
	}
	t.unpin()
	p, v, why := liveness.Pin(id)
	t.pinned, t.pinnedID = p, id
	if p == nil {
		t.log.Debug("runnerstate: takeover could not pin the holder", "dir", t.dir, "pid", id.PID, "verdict", v.String(), "why", why)
	}
	return p != nil
}

// unpin lets go of the pin on the holder, if any.
func (t *takeover) unpin() {
	if t.pinned != nil {
		t.pinned.Close()
		t.pinned = nil
	}
}

// signal sends sig to the pinned holder, which re-verifies it first, when it
// still holds the lock of lockPath.
func (t *takeover) signal(sig liveness.Signal, lockPath string) {
	if t.pinned == nil {
		return
	}
	pid := t.pinned.PID()
	// The step was decided from a look taken before the gate update, which
	// may have waited for the state lock: the holder may have let go since.
	// Where the kernel lists lock holders, signal only a pinned process it
	// still names as the holder. (The kernel has no "signal if it holds the
	// lock"; what is left is the microseconds between this look and the
	// signal, against a process that is verified and pinned.)
	if !locktable.StillHolds(lockPath, pid) {
		t.log.Info("runnerstate: takeover did not signal the runner: it released the directory", "dir", t.dir, "pid", pid, "signal", sig.String())
		return
	}
	err := t.pinned.Signal(sig)
	why := "the grace period ended"
	if sig == liveness.SIGKILL {
		why = "it outlived SIGTERM by the kill-after period"
	}
	t.logSignal(pid, sig, err, why, "runnerstate: takeover signalled the runner", "runnerstate: takeover did not signal the runner")
}

// signalOrphans sends sig to every process that holds the tree lock at
// treePath now: each one found by a scan, pinned, and checked through the
// pin to hold it; a process that does not (a plain child, one that closed
// its copy, one with the file open but not locked) is never signalled.
func (t *takeover) signalOrphans(sig liveness.Signal, treePath string) {
	pids, complete := orphans(t.dir, 0)
	if !complete {
		t.log.Warn("runnerstate: takeover could not read every process's descriptors; an orphan may be missed", "dir", t.dir)
	}
	for _, pid := range pids {
		p := lockholder.Pinned(pid, treePath)
		if p == nil {
			continue
		}
		err := p.Signal(sig)
		t.logSignal(pid, sig, err, "the runner is gone and its tree still holds the directory", "runnerstate: takeover signalled an orphan", "runnerstate: takeover did not signal an orphan")
		p.Close()
	}
}

// logSignal says, with why, that pid was sent sig (sent), or that it was
// not (failed, with err). SIGTERM after the grace period is the takeover's
// plan, and Info; a process that had to be killed, or could not be
// signalled, is a warning: its shutdown is cut short, or the takeover waits
// on it until ctx ends.
func (t *takeover) logSignal(pid int, sig liveness.Signal, err error, why, sent, failed string) {
	args := []any{"dir", t.dir, "pid", pid, "signal", sig.String(), "why", why}
	switch {
	case err != nil:
		t.log.Warn(failed, append(args, "err", err)...)
	case sig == liveness.SIGKILL:
		t.log.Warn(sent, args...)
	default:
		t.log.Info(sent, args...)
	}
}

// awaitPrevious waits, at most KillAfter and never past ctx, for the
// pinned holder's process to exit: it released the lock, but may still be
// finishing its exit. The starter goes on either way. A holder that let go
// on purpose to linger (linger.json names it, and it is not taking the
// directory back) is not waited for: it serves only what it had accepted,
// and ReapLingering bounds it.
func (t *takeover) awaitPrevious(ctx context.Context) {
	p := t.pinned
	if p == nil {
		return
	}
	t.pinned = nil
	defer p.Close()
	if l, ok, _ := ReadLingering(t.dir); ok && !l.Retaking && sameProcess(l.Holder, Identity(t.pinnedID)) {
		t.log.Info("runnerstate: the previous runner let go to linger; not waiting for its exit", "dir", t.dir, "pid", p.PID(), "deadline", l.Deadline)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, t.opts.KillAfter)
	defer cancel()
	if err := p.Wait(wctx); err != nil && ctx.Err() == nil {
		t.log.Warn("runnerstate: the previous runner released the directory but has not exited", "dir", t.dir, "pid", p.PID(), "waited", t.opts.KillAfter)
	}
}

// enter makes this starter the runner, holding p, once the previous
// runner's process has exited (until then no other starter can verify, and
// so signal, this one; a newer starter that comes meanwhile supersedes it);
// errLost when a lock file of p was lost meanwhile.
func (t *takeover) enter(ctx context.Context, p pair) (*hold.Hold, error) {
	if err := keepIfLive(ctx, t.live, t.lockPath, p.release); err != nil {
		return nil, err
	}
	if err := checkProtocol(t.dir, true); err != nil {
		p.release() // a newer build came meanwhile (or its runner, killed, left its line)
		return nil, err
	}
	h, err := t.admit(ctx, p)
	switch {
	case err == errNotNewest:
		return nil, t.superseded()
	case err != nil && ctx.Err() != nil:
		return nil, t.busy(ctx.Err())
	case err != nil:
		return nil, err
	}
	if err := keepIfLive(ctx, t.live, t.lockPath, h.Release); err != nil {
		return nil, err
	}
	return h, nil
}

// admit makes this starter the runner, holding p: if it is still the newest
// starter, it leaves the gate, writes its identity, clears what the previous
// runner left and publishes its record. Otherwise it lets p go and returns
// errNotNewest; errLost when a lock file of p was lost before its record was
// published.
func (t *takeover) admit(ctx context.Context, p pair) (*hold.Hold, error) {
	h, err := newHold(t.dir, p, t.self)
	if err != nil {
		p.release()
		return nil, err
	}
	newest := true
	err = withStateLockCtx(ctx, t.dir, func(held stateHeld) error {
		return updateGateLocked(held, func(g *gateState) error {
			if g.NewerThan(t.seq) || t.yieldTo(g) != nil {
				newest = false
				return nil
			}
			g.Remove(t.seq)
			g.Admitted = t.seq
			g.Escalation = nil
			g.Handover = t.starter.Rendezvous
			if err := stamp(h); err != nil {
				return err
			}
			settleIn(held, t.self, t.start)
			return nil
		})
	})
	if err != nil || !newest {
		p.release()
		if err == nil {
			err = errNotNewest
		}
		return nil, err
	}
	t.request = nil      // retired with the previous runner
	ReapLingering(t.dir) // a lingering predecessor past its kill_at, or gone
	h.Describe(t.opts.Program, t.opts.Version)
	holds.Add(h)
	if fn := testHookAdmitting.Load(); fn != nil {
		(*fn)(t.dir)
	}
	if err := publish(t.dir, Record{}); errors.Is(err, ErrNotDurable) {
		// Published: the record is in place, and describes a live process.
		t.log.Info("runnerstate: takeover published its record, but its directory could not be synced", "dir", t.dir, "err", err)
	} else if err != nil {
		lost, _ := h.Lost()
		h.Release()
		if lost {
			return nil, errLost
		}
		return nil, err
	}
	return h, nil
}

// testHookAdmitting, when set, is called by admit once the starter is
// recorded admitted and before its record is published: a test deletes a
// lock file there, a fault the kernel does not give on demand.
var testHookAdmitting atomic.Pointer[func(dir string)]

// withdraw leaves the waiting list and takes back this starter's restart
// request if it is still pending as written and no other starter waits.
func (t *takeover) withdraw() {
	t.unpin()
	// Withdrawing must happen even when the caller's context has ended; the
	// state lock's own bound keeps it finite.
	err := updateGate(context.Background(), t.dir, func(g *gateState) error {
		g.Remove(t.seq)
		if len(g.Waiting) > 0 || t.request == nil {
			return nil
		}
		g.Escalation = nil
		if req, ok := readRestart(t.dir); ok && sameRequest(req, *t.request) && req.Takeover && req.By.Instance == t.self.Instance {
			if err := t.takeBack(); err != nil {
				return public(err)
			}
			// A runner that WatchRestart has told already goes on:
			// withdrawing cannot call a drain or a stop back.
			t.log.Info("runnerstate: takeover withdrew its restart request (a runner already acting on it still drains or stops, and nothing takes its place)", "dir", t.dir, "mode", req.Mode)
		}
		return nil
	})
	if err != nil {
		t.log.Info("runnerstate: takeover could not withdraw from the gate; it counts as a waiting starter until this process exits",
			"dir", t.dir, "path", filepath.Join(t.dir, gateName), "err", err)
	}
}

// takeBack removes this starter's restart request, or, when it upgraded an
// operator's, puts the operator's back: a takeover that gives up withdraws
// only what it wrote. Called under the state lock.
func (t *takeover) takeBack() error {
	if t.replaced == nil {
		return durable.Remove(t.dir, RestartName)
	}
	data, err := protocolLine(*t.replaced)
	if err != nil {
		return err
	}
	return durable.Write(t.dir, RestartName, data)
}

// superseded is this starter's ErrSuperseded: it names the directory and,
// when the gate still lists it, the newest starter.
func (t *takeover) superseded() error {
	if t.yielded != nil {
		return t.yielded
	}
	g, _ := readGate(t.dir)
	if newest := g.Newest(t.seq); newest.Starter.PID > 0 {
		return fmt.Errorf("%w %s: pid %d started after this one", ErrSuperseded, t.dir, newest.Starter.PID)
	}
	return fmt.Errorf("%w %s", ErrSuperseded, t.dir)
}

// busy describes the holder for a starter whose context ended: the runner,
// or, when only tree.lock is held, an orphan or a runner whose runner.lock
// was lost.
func (t *takeover) busy(cause error) error {
	return runnerBusy(t.dir, inspectRunner(t.dir).occupancy(), cause)
}

// runnerBusy is the *BusyError of a wait on dir that ended (cause) while
// occ held it: the tree's holder when only tree.lock was held, else the
// runner.
func runnerBusy(dir string, occ occupancy, cause error) error {
	if occ == occOrphans || occ == occLostFile {
		return treeBusyError(dir, cause)
	}
	return busyError(filepath.Join(dir, LockName), cause, inspectRunnerLock)
}
