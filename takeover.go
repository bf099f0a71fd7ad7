package runnerstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/runnerstate/runnerstate/internal/await"
	"github.com/runnerstate/runnerstate/internal/bridge"
	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/handoff"
	"github.com/runnerstate/runnerstate/internal/hold"
	"github.com/runnerstate/runnerstate/internal/liveness"
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

// ErrOtherProgram reports a directory held by a runner of another program:
// the verified holder's record names a Program other than the caller's
// (both non-empty). It is returned wrapped in an error that also matches
// ErrBusy and names both programs; nothing was asked, signalled or written.
var ErrOtherProgram = errors.New("runnerstate: the directory is held by a runner of another program")

// Default TakeoverOptions.
const (
	DefaultGrace     = 5 * time.Second
	DefaultKillAfter = 5 * time.Second
)

// drainGrace is the Grace of a drain asked with no Grace: it never ends, so
// the runner is never signalled and the wait ends with ctx.
const drainGrace = gate.Unending

func (o TakeoverOptions) withDefaults() TakeoverOptions {
	if o.Mode == "" {
		o.Mode = RestartNow
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
		if o.Mode == RestartDrain {
			o.Grace = drainGrace
		}
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
//     SIGTERM, and after KillAfter more, SIGKILL. A drain (opts.Mode
//     RestartDrain) with no Grace is never escalated: it waits for the
//     runner to finish its jobs and exit, until ctx ends. Each signal goes through a
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
// The gate (gate.json) is how starters agree on who is newest and on what was
// already asked and sent. When it cannot be written (a full disk, a
// read-only filesystem, no descriptor left): a starter that cannot register
// returns that error before it asks or signals anything; one that cannot
// record its admission lets the directory go and returns the error, so no
// runner is ever admitted outside the gate; one that cannot withdraw (its
// context ended, or it was refused) returns its own answer all the same and
// logs it at Info: its entry stays, and counts as a waiting starter (in
// Status too) while its process lives. It never holds back a newer starter
// (only older ones yield to it, as they did while it waited), and it is void
// once its process exits.
//
// Errors: ErrBadMode for a bad opts.Mode; ErrOtherProgram (which matches
// ErrBusy too) when opts.Program is set and the verified holder's record
// names another, before anything is asked or written; ErrSuperseded, wrapped with the
// directory and the newer starter's pid (match it with errors.Is); a *BusyError when ctx
// ends; otherwise the errors of Acquire, or of gate.json, naming it;
// ErrNewerProtocol (wrapped, naming the file and both protocol numbers) when one of dir's files says a protocol newer than this build's, before the gate is joined, or at admission, when the lock is
// let go again. Touches runner.lock, runner.json, restart.json and
// gate.json.
func Takeover(ctx context.Context, dir string, opts TakeoverOptions) (release func(), err error) {
	if err := checkDir("Takeover", dir); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if strength(opts.Mode) == 0 {
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
		if ctx.Err() != nil && (errors.Is(err, ErrBusy) || errors.Is(err, ctx.Err())) {
			return nil, t.busy(ctx.Err()) // the wait for the state lock ended with ctx
		}
		return nil, err // gate.json could not be written: that is the answer, whatever ctx says
	}
	t.wait = &handoff.Wait[pair, *hold.Hold]{Dir: t.dir, Seq: t.seq, KillAfter: t.opts.KillAfter, Protocol: t}
	h, err := t.wait.Run(ctx)
	if err != nil {
		t.withdraw()
		return nil, err
	}
	return h.Release, nil
}

// takeover is one starter's attempt. It is the runner directory's side of
// the starter's wait (handoff.Protocol): what holds the directory, what a
// step is against, the restart request, and this package's words for each
// step.
type takeover struct {
	dir, lockPath string
	opts          TakeoverOptions
	start         time.Time
	self          Identity
	log           *slog.Logger
	seq           uint64
	live          bool            // ctx had not ended when it began (keepIfLive)
	request       *restartRequest // the restart request this starter wrote, if any
	wait          *handoff.Wait[pair, *hold.Hold]
	starter       bridge.Starter // what package daemon said of this starter
	yielded       error          // the step-aside answer, once the gate decided it
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
			Program: t.opts.Program, Version: t.opts.Version, Rendezvous: t.starter.Rendezvous})
		return nil
	})
}

// yieldTo is the step-aside answer of a starter that yields (package
// daemon's, for a server a client started) when the holder of dir (one
// that is not leaving), or a live starter waiting for it, runs the same
// Program at the same or a newer Version: a client's copy never bounces a
// deploy, of its own version or a newer one. nil otherwise, and always when
// either version cannot be compared. Called under the state lock, with g
// the gate.
func (t *takeover) yieldTo(g *gateState) error {
	compare := bridge.CompareVersions
	if !t.starter.Yield || compare == nil || t.opts.Program == "" || t.opts.Version == "" {
		return nil
	}
	notOlder := func(program, version string) bool {
		cmp, ok := compare(version, t.opts.Version)
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

// withdraw leaves the waiting list and takes back this starter's restart
// request if it is still pending as written and no other starter waits.
func (t *takeover) withdraw() {
	if t.wait != nil {
		t.wait.Close()
	}
	// Withdrawing must happen even when the caller's context has ended; the
	// state lock's own bound keeps it finite.
	err := updateGate(context.Background(), t.dir, func(g *gateState) error {
		g.Remove(t.seq)
		if len(g.Waiting) > 0 || t.request == nil {
			return nil
		}
		g.Attempt = nil
		if req, ok := readRestart(t.dir); ok && sameRequest(req, *t.request) && req.By.Instance == t.self.Instance {
			if err := durable.Remove(t.dir, RestartName); err != nil {
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

// Lost is the answer when the pair was lost in admission n times.
func (t *takeover) Lost(n int) error {
	return fmt.Errorf("runnerstate: %s: its lock files were deleted or replaced %d times while being taken; stop whatever removes them", t.dir, n)
}

// Try takes the pair of locks without waiting (tryPair): held is what it
// found busy, runner.lock or only tree.lock.
func (t *takeover) Try() (pair, handoff.Held, error) {
	p, err := tryPair(t.dir)
	var be *BusyError
	switch {
	case err == nil:
		return p, handoff.Free, nil
	case err == errTreeBusy:
		return p, handoff.TreeHeld, nil
	case errors.As(err, &be):
		return p, handoff.LockHeld, nil
	}
	return p, handoff.Free, err
}

// AwaitFree waits for runner.lock, or for tree.lock when only that is
// held, and lets it go at once.
func (t *takeover) AwaitFree(ctx context.Context, held handoff.Held) (bool, error) {
	path, inspect := t.lockPath, inspector(inspectRunnerLock)
	if held == handoff.TreeHeld {
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

func (t *takeover) ReadGate() gateState {
	g, _ := readGate(t.dir)
	return g
}

func (t *takeover) UpdateGate(ctx context.Context, fn func(g *gateState) error) error {
	return updateGate(ctx, t.dir, fn)
}

func (t *takeover) Orphans() ([]int, bool) { return orphans(t.dir, 0) }

func (t *takeover) Busy(cause error) error { return t.busy(cause) }

func (t *takeover) Superseded() error { return t.superseded() }

// Enter makes this starter the runner, holding p, once the previous
// runner's process has exited (until then no other starter can verify, and
// so signal, this one; a newer starter that comes meanwhile supersedes it).
func (t *takeover) Enter(ctx context.Context, p pair) (*hold.Hold, error) {
	if err := keepIfLive(ctx, t.live, t.lockPath, p.release); err != nil {
		return nil, err
	}
	if err := checkProtocol(t.dir, true); err != nil {
		p.release() // a newer build came meanwhile (or its runner, killed, left its line)
		return nil, err
	}
	h, err := t.admit(ctx, p)
	switch {
	case err == handoff.ErrNotNewest:
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

// Target is what a step is against. While runner.lock is held: its holder,
// which is asked to restart, and signalled only when it is verified alive
// and signals are allowed (a holder that cannot be verified, or any with
// NoSignal, is told once that it is only asked). While only tree.lock is
// held: a runner whose runner.lock was lost (tree.lock names it, and it
// holds tree.lock through the descriptor it recorded) has been told
// RestartLost by its own WatchRestart: it gets Grace, then SIGTERM, then
// SIGKILL, as a verified runner does, without a request. Otherwise the
// holders are orphans of a runner that is gone: SIGTERM at once, SIGKILL
// KillAfter later, each one pinned and checked to still hold tree.lock
// before each signal. With NoSignal nothing is signalled.
func (t *takeover) Target(held handoff.Held) (handoff.Target, bool, error) {
	st := inspectRunner(t.dir)
	occ := st.occupancy()
	if st.err != nil {
		return handoff.Target{}, false, st.err
	}
	treePath := filepath.Join(t.dir, treeLockName)
	at := handoff.Target{Key: st.holder.Instance, PID: st.pid, Grace: t.opts.Grace, Lock: t.lockPath}
	switch {
	case held == handoff.LockHeld && !occ.held(), held == handoff.TreeHeld && occ != occLostFile && occ != occOrphans:
		return handoff.Target{}, false, nil // it changed since the try: try again at once
	case held == handoff.LockHeld:
		at.Ask = true
		if !t.opts.NoSignal && occ.verified() && st.verdict == liveness.Alive {
			at.Signal, at.Holder = handoff.Holder, liveness.Identity(st.holder)
		} else if t.opts.NoSignal || !occ.verified() {
			warnOnceTo(t.log, fmt.Sprintf("takeover-unverified:%s:%d:%s", t.dir, st.pid, st.holder.Instance),
				"runnerstate: takeover will not signal the holder; it leaves a restart request and waits", "dir", t.dir, "pid", st.pid, "why", st.reason, "no_signal", t.opts.NoSignal)
		}
	case occ == occLostFile:
		at.Lock = treePath
		if at.Grace == drainGrace {
			at.Grace = DefaultGrace // told RestartLost, it is not draining
		}
		if !t.opts.NoSignal && st.verdict == liveness.Alive {
			at.Signal, at.Holder = handoff.Holder, liveness.Identity(st.holder)
		}
	default: // orphans
		at = handoff.Target{Key: "tree:orphans", Lock: treePath}
		if !t.opts.NoSignal {
			at.Signal = handoff.Orphans
		}
	}
	return at, true, nil
}

// Ask leaves the restart request of the current attempt (in the gate), or
// upgrades its mode. Called under the state lock.
func (t *takeover) Ask(g *gateState, pid int) error {
	a := g.Attempt
	if strength(t.opts.Mode) <= strength(a.Mode) {
		return nil // asked already, as strongly
	}
	a.Mode = t.opts.Mode
	req, wrote, err := requestRestartLocked(t.dir, g.Attempt.Mode, t.self, true)
	if err != nil {
		return err
	}
	if wrote {
		t.request = &req
		t.log.Info("runnerstate: takeover asked the runner to restart", "dir", t.dir, "pid", pid, "mode", g.Attempt.Mode)
	}
	return nil
}

// Report says what a step did.
func (t *takeover) Report(e handoff.Event) {
	switch e.What {
	case handoff.NotPinned:
		t.log.Debug("runnerstate: takeover could not pin the holder", "dir", t.dir, "pid", e.PID, "verdict", e.Verdict.String(), "why", e.Why)
	case handoff.HolderReleased:
		t.log.Info("runnerstate: takeover did not signal the runner: it released the directory", "dir", t.dir, "pid", e.PID, "signal", e.Signal.String())
	case handoff.Signalled:
		why := "the grace period ended"
		if e.Signal == liveness.SIGKILL {
			why = "it outlived SIGTERM by the kill-after period"
		}
		t.reportSignal(e, why, "runnerstate: takeover signalled the runner", "runnerstate: takeover did not signal the runner")
	case handoff.OrphansMissed:
		t.log.Warn("runnerstate: takeover could not read every process's descriptors; an orphan may be missed", "dir", t.dir)
	case handoff.OrphanSignalled:
		t.reportSignal(e, "the runner is gone and its tree still holds the directory", "runnerstate: takeover signalled an orphan", "runnerstate: takeover did not signal an orphan")
	case handoff.PreviousRunning:
		t.log.Warn("runnerstate: the previous runner released the directory but has not exited", "dir", t.dir, "pid", e.PID, "waited", e.Waited)
	}
}

// reportSignal says, with why, that e's process was signalled (sent), or
// that it was not (failed, with the error). SIGTERM after the grace period
// is the takeover's plan, and Info; a process that had to be killed, or
// could not be signalled, is a warning: its shutdown is cut short, or the
// takeover waits on it until ctx ends.
func (t *takeover) reportSignal(e handoff.Event, why, sent, failed string) {
	args := []any{"dir", t.dir, "pid", e.PID, "signal", e.Signal.String(), "why", why}
	switch {
	case e.Err != nil:
		t.log.Warn(failed, append(args, "err", e.Err)...)
	case e.Signal == liveness.SIGKILL:
		t.log.Warn(sent, args...)
	default:
		t.log.Info(sent, args...)
	}
}

// admit makes this starter the runner, holding p: if it is still the newest
// starter, it leaves the gate, writes its identity, clears what the previous
// runner left and publishes its record. Otherwise it lets p go and returns
// handoff.ErrNotNewest.
func (t *takeover) admit(ctx context.Context, p pair) (*hold.Hold, error) {
	h, err := newHold(t.dir, p, t.self)
	if err != nil {
		p.release()
		return nil, err
	}
	newest := true
	err = withStateLockCtx(ctx, t.dir, func() error {
		return updateGateLocked(t.dir, func(g *gateState) error {
			if g.NewerThan(t.seq) || t.yieldTo(g) != nil {
				newest = false
				return nil
			}
			g.Remove(t.seq)
			g.Admitted = t.seq
			g.Attempt = nil
			g.Handover = t.starter.Rendezvous
			if err := stamp(h); err != nil {
				return err
			}
			settleIn(t.dir, t.self, t.start)
			return nil
		})
	})
	if err != nil || !newest {
		p.release()
		if err == nil {
			err = handoff.ErrNotNewest
		}
		return nil, err
	}
	t.request = nil // retired with the previous runner
	h.Describe(t.opts.Program, t.opts.Version)
	holds.Add(h)
	if err := publish(t.dir, Record{}); errors.Is(err, ErrNotDurable) {
		// Published: the record is in place, and describes a live process.
		t.log.Info("runnerstate: takeover published its record, but its directory could not be synced", "dir", t.dir, "err", err)
	} else if err != nil {
		lost, _ := h.Lost()
		h.Release()
		if lost {
			return nil, handoff.ErrLost
		}
		return nil, err
	}
	return h, nil
}

// warnOnceTo is warnOnce for the caller's logger, at info level: a standby
// says once what it waits for.
func warnOnceTo(log *slog.Logger, key, msg string, args ...any) {
	if firstTime(key) {
		log.Info(msg, args...)
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
	// Logger receives the one line naming the owner (Info); nil means the
	// package's logger (SetLogger), which by default does not print it.
	Logger *slog.Logger
}

// StandbyResult is how a standby ended. Its owner is the runner process
// that held the directory (not a data dir, as BusyError.Owner is).
type StandbyResult struct {
	Resumed          bool // the owner is gone: this process may take the directory
	PreviousOwnerPID int  // the pid of the runner that held the directory, when one was seen
	WorkCompleted    bool // WorkIsComplete returned true
}

// Standby waits while another live runner owns dir, for a process that may
// borrow the runner's work (a CLI that would run a job itself when no runner
// does). It logs once which pid owns dir, then returns Resumed, with that pid,
// as soon as the owner is gone (the kernel lock is free: it released, or it
// died) and so is its tree (no orphans of it hold tree.lock; see Inherit), or
// WorkCompleted when opts.WorkIsComplete says so. While a Takeover starter
// verified alive waits to be admitted, the directory is about to be its:
// Standby waits for it too (and then for the runner it becomes), rather than
// let its caller take the directory in the instant between the old runner's
// exit and that starter's admission. With no owner and no such starter it
// returns Resumed at once. It never takes the lock: take it with Acquire or
// Takeover after a Resumed.
//
// It wakes within milliseconds of the owner's exit: through the owner's pidfd
// and inotify on Linux, elsewhere by polling every 20 ms.
//
// Errors: when ctx ends first, a *BusyError naming the owner and wrapping
// ctx's error; an error naming the path when runner.lock is a symlink or a
// directory; ErrLockingUnsupported, at once, on a filesystem whose locks do
// not exclude (see ErrLockingUnsupported), where a free lock proves nothing.
func Standby(ctx context.Context, dir string, opts StandbyOptions) (StandbyResult, error) {
	if err := checkDir("Standby", dir); err != nil {
		return StandbyResult{}, err
	}
	if err := filelock.Judge(filepath.Join(dir, LockName)); err != nil {
		return StandbyResult{}, public(err) // a lock that cannot exclude never says the owner is gone
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = logger()
	}
	s := &standby{dir: dir, opts: opts, wait: await.New(dir, opts.Interval, opts.WorkIsComplete)}
	defer s.wait.Close()
	for {
		st := inspectRunner(dir)
		if st.err != nil {
			return s.res, st.err
		}
		occ := st.occupancy()
		free := occ == occFree
		if free {
			starter, waits := startingNow(dir)
			if !waits {
				s.res.Resumed = true
				return s.res, nil
			}
			warnOnceTo(s.opts.Logger, "standby-starter:"+dir, "runnerstate: standing by while a takeover starter is being admitted", "dir", dir, "starter", starter.PID)
		} else {
			s.follow(ctx, st)
		}
		if s.wait.Checked() {
			s.res.WorkCompleted = true
			return s.res, nil
		}
		if err := s.wait.Wait(ctx); err != nil {
			return s.res, runnerBusy(dir, occ, err)
		}
	}
}

// startingNow returns a Takeover starter that waits in dir's gate and is
// verified alive (not this process): the directory is about to be its, and a
// standby yields to it rather than take the directory in the instant between
// the old runner's exit and the starter's admission (the newest starter
// wins). A starter whose liveness cannot be verified is not waited for.
func startingNow(dir string) (Identity, bool) {
	g, _ := readGate(dir)
	for _, e := range g.Waiting {
		if v, _ := liveness.Check(e.Starter); v == liveness.Alive {
			return Identity(e.Starter), true
		}
	}
	return Identity{}, false
}

// standby is one Standby's state: the owner it names, and its wait.
type standby struct {
	dir  string
	opts StandbyOptions
	res  StandbyResult
	wait *await.Waiter
}

// follow names a new owner once, and follows a verified one to wake when
// it exits.
func (s *standby) follow(ctx context.Context, st lockState) {
	occ := st.occupancy()
	if !occ.held() {
		warnOnceTo(s.opts.Logger, "standby-tree:"+s.dir, "runnerstate: standing by while processes of a previous runner's tree hold the directory", "dir", s.dir)
		return
	}
	if st.pid != s.res.PreviousOwnerPID {
		s.res.PreviousOwnerPID = st.pid
		s.opts.Logger.Info("runnerstate: standing by while another runner owns the directory", "dir", s.dir, "pid", st.pid, "verified", occ.verified())
	}
	if occ.verified() && st.verdict == liveness.Alive {
		s.wait.Follow(ctx, liveness.Identity(st.holder))
	}
}

// The takeover gate: gate.json holds a gate.State (internal/gate). It is
// read and written only under the directory's state lock, and written
// atomically but without fsync: it describes live processes, and after a
// power loss none of them is left.
type (
	gateState   = gate.State
	gateEntry   = gate.Entry
	gateAttempt = gate.Attempt
)

// readGate reads gate.json; a missing or unreadable one is an empty gate (the
// problem is logged once, and the next writer replaces it), with a warning
// for Status.
func readGate(dir string) (gateState, string) {
	path := filepath.Join(dir, gateName)
	g, state, err := readState(path, gate.Parse)
	if state != fileCorrupt {
		return g, ""
	}
	infoOnce("gate:"+err.Error(), "runnerstate: ignoring a takeover gate that cannot be read", "path", path, "err", err)
	if unusablePath(err) {
		// Not a file a writer may replace: Takeover refuses it.
		return gateState{}, fmt.Sprintf("%v; Takeover refuses the directory until it is moved away", err)
	}
	return gateState{}, fmt.Sprintf("%v; it is ignored, and the next Takeover replaces it", err)
}

// updateGate runs fn on the gate under dir's state lock and writes the result
// back. fn runs with the lock held and may touch other state files with the
// *Locked helpers; it must not take the state lock itself (a call that does
// fails at once, see withStateLockCtx).
func updateGate(ctx context.Context, dir string, fn func(g *gateState) error) error {
	return withStateLockCtx(ctx, dir, func() error { return updateGateLocked(dir, fn) })
}

func updateGateLocked(dir string, fn func(g *gateState) error) error {
	g, _ := readGate(dir)
	g.Prune()
	if err := fn(&g); err != nil {
		return err
	}
	data, err := protocolLine(g)
	if err != nil {
		return err
	}
	return public(durable.WriteVolatile(dir, gateName, data))
}

func init() {
	bridge.Logger = logger
	bridge.OtherProgram = func(dir string, pid int, holderProgram, program string) error {
		return otherProgram(dir, Record{PID: pid, Program: holderProgram}, program)
	}
	bridge.Successors = successors
	bridge.Waiting = func(dir string) int {
		ids, _ := waitingStarters(dir)
		return len(ids)
	}
}

// successors lists the live starters waiting for dir that have a
// rendezvous, newest first, then the one admitted last, when it had one
// (bridge.Successors).
func successors(dir string) []bridge.Successor {
	g, _ := readGate(dir)
	var out []bridge.Successor
	for _, e := range slices.Backward(g.Waiting) {
		if e.Rendezvous != "" && e.Live() {
			out = append(out, bridge.Successor{PID: e.Starter.PID, Instance: e.Starter.Instance, Rendezvous: e.Rendezvous})
		}
	}
	if g.Handover != "" {
		out = append(out, bridge.Successor{Rendezvous: g.Handover, Admitted: true})
	}
	return out
}

// waitingStarters lists the live starters waiting in Takeover for dir, oldest
// first, and a warning when the gate file cannot be read.
func waitingStarters(dir string) ([]Identity, string) {
	g, warn := readGate(dir)
	var ids []Identity
	for _, e := range g.Waiting {
		if e.Live() {
			ids = append(ids, Identity(e.Starter))
		}
	}
	return ids, warn
}
