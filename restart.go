package runnerstate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/hold"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// Restart modes: what a restart request asks of the runner.
const (
	// RestartDrain asks the runner to take no new job and exit when the jobs
	// it is running have finished.
	RestartDrain = "drain"
	// RestartNow asks the runner to exit at once.
	RestartNow = "now"
	// RestartLost tells the runner that a lock file of its hold (runner.lock
	// or tree.lock) was deleted, renamed or replaced while it held it, or
	// its directory is gone: stop at once, since another runner may be
	// admitted beside it. It is stronger than RestartNow, is never written
	// to restart.json (RequestRestart refuses it with ErrBadMode), and is
	// delivered by WatchRestart only inside the holding process.
	RestartLost = "lost"
)

// ErrBadMode reports a restart mode other than RestartDrain and RestartNow.
var ErrBadMode = errors.New("runnerstate: restart mode must be \"drain\" or \"now\"")

// restartRequest is the content of restart.json.
type restartRequest struct {
	Mode        string    `json:"mode"`
	RequestedAt time.Time `json:"requested_at,omitzero"`
	By          Identity  `json:"by,omitzero"`
	// For is the instance of the runner that held the lock when the request
	// was made, or "" when none did. A fresh holder retires requests made for
	// another instance.
	For string `json:"for"`
	// Takeover marks a request left by a starter in Takeover: it is meant for
	// the runner being taken over, never for the starter admitted after it,
	// so an admission retires it whatever its addressee and time.
	Takeover bool `json:"takeover,omitempty"`
}

// ModeStrength orders the modes a restart request may ask for: 2 for
// RestartNow, 1 for RestartDrain, and 0 for any other mode, which no
// request may ask (ErrBadMode; RestartLost is no request). A request never
// weakens a pending one: RequestRestart keeps a pending request of the
// same or a greater strength. Code that carries restart requests of its
// own (the etcd module does, on a leader key) checks a mode and keeps the
// same order with it.
func ModeStrength(mode string) int {
	switch mode {
	case RestartNow:
		return 2
	case RestartDrain:
		return 1
	}
	return 0
}

// void reports whether a request is void: dated more than a minute ahead
// (aheadOf, trust.go: no writer of this machine's clock wrote it), or a
// takeover request whose starter is provably dead (Dead, or Stale: its pid
// now names another process, or the machine rebooted), so nobody waits for
// the runner to go. Otherwise a request written by RequestRestart (an
// operator's) is never void, whoever wrote it.
func (r restartRequest) void() bool {
	if aheadOf(r.RequestedAt) {
		return true
	}
	if !r.Takeover {
		return false
	}
	v, _ := liveness.Check(liveness.Identity(r.By))
	return v == liveness.Dead || v == liveness.Stale
}

// pendingRestart is the request pending in restart.json: none when it cannot
// be read, and none when it is void.
func pendingRestart(dir string) (restartRequest, bool) {
	req, ok := readRestart(dir)
	if !ok || req.void() {
		return restartRequest{}, false
	}
	return req, true
}

// RequestRestart leaves a restart request for dir's runner in restart.json,
// addressed to the runner that holds the lock now. When none does, the
// request is kept only for a runner being admitted at that moment; a runner
// that starts afterwards retires it as meant for its predecessor. It never
// weakens a pending request: "now" stays "now", and "now" upgrades a pending
// "drain"; a void one (left by a Takeover starter that has died) counts as
// none and is written over. The runner sees it through RestartRequested or
// WatchRestart; this call does not wait for the runner to act. A request
// made here stands whoever made it, and whatever becomes of its maker.
//
// Errors: ErrBadMode for any mode but RestartDrain and RestartNow; an error
// naming dir when it does not exist; a symlink or directory at restart.json is
// refused naming the path, and so is one at runner.lock (no runner can be
// admitted there to read the request); a restart.json that is there but cannot be read
// (an I/O error, no descriptor left) is left as it is and its error returned,
// since writing over a request it cannot read could weaken it;
// ErrNotDurable when the request is in place (the runner sees it) but the
// directory could not be synced; ErrNewerProtocol (wrapped, naming the file and both protocol numbers) when one of dir's files says a protocol newer than this build's, and nothing is written. Touches restart.json (atomically) under the
// directory's state lock, whose wait is bounded by 30 s (another process
// may hold it): then a *BusyError (ErrBusy) names .state.lock and its holder.
func RequestRestart(dir, mode string) error {
	_, err := requestRestart(context.Background(), dir, mode, Self())
	return err
}

// RequestRestartContext is RequestRestart whose wait for the directory's
// state lock (which another process may hold) also ends with ctx: it
// returns by ctx's end with a *BusyError naming .state.lock and its holder,
// matching ErrBusy and ctx's error. RequestRestart's own wait is bounded by
// 30 s. daemon.Stop asks through this.
func RequestRestartContext(ctx context.Context, dir, mode string) error {
	_, err := requestRestart(ctx, dir, mode, Self())
	return err
}

// requestRestart writes or upgrades the request and returns the request now
// pending. by is who asks; ctx bounds the wait for the state lock.
func requestRestart(ctx context.Context, dir, mode string, by Identity) (restartRequest, error) {
	if ModeStrength(mode) == 0 {
		return restartRequest{}, fmt.Errorf("%w, not %q", ErrBadMode, mode)
	}
	if err := ownDir("RequestRestart", dir); err != nil {
		return restartRequest{}, err
	}
	if fi, err := os.Stat(dir); err != nil {
		return restartRequest{}, pathError("restart", dir, durable.Unwrap(err))
	} else if !fi.IsDir() {
		return restartRequest{}, pathError("restart", dir, durable.ErrNotDir)
	}
	if err := checkProtocol(dir, true); err != nil {
		return restartRequest{}, err
	}
	var pending restartRequest
	err := withStateLockCtx(ctx, dir, func(held stateHeld) error {
		var err error
		pending, _, err = requestRestartLocked(held, mode, by, false)
		return err
	})
	return pending, err
}

// requestRestartLocked is requestRestart for a caller that holds the
// directory's state lock. wrote says whether a new request was written
// (rather than a pending one of equal or greater strength kept).
func requestRestartLocked(held stateHeld, mode string, by Identity, takeover bool) (pending restartRequest, wrote bool, err error) {
	dir := held.dir
	target := ""
	st := inspectRunner(dir)
	if st.err != nil {
		return restartRequest{}, false, st.err // no runner can be admitted there to read it
	}
	if id, ok := st.namedHolder(); ok {
		target = id.Instance
	}
	old, ok, err := pendingForWrite(dir)
	if err != nil {
		return restartRequest{}, false, err
	}
	if ok && old.For == target && ModeStrength(old.Mode) >= ModeStrength(mode) {
		if takeover || !old.Takeover {
			return old, false, nil
		}
		// An operator's request joins a takeover's as strong: it becomes
		// the operator's (the same request, which a runner that read it
		// is not told again), so that a takeover that gives up, which
		// withdraws only its own, leaves it standing.
		old.Takeover, old.By = false, by
		data, err := protocolLine(old)
		if err != nil {
			return restartRequest{}, false, err
		}
		if err := durable.Write(dir, RestartName, data); err != nil {
			return restartRequest{}, false, public(err)
		}
		return old, true, nil
	}
	pending = restartRequest{Mode: mode, RequestedAt: time.Now(), By: by, For: target, Takeover: takeover}
	data, err := protocolLine(pending)
	if err != nil {
		return restartRequest{}, false, err
	}
	if err := durable.WriteToAll(dir, RestartName, data); err != nil {
		return restartRequest{}, false, public(err)
	}
	return pending, true, nil
}

// pendingForWrite is pendingRestart for a writer about to replace
// restart.json: a file that is there but cannot be read (an I/O error, no
// descriptor left) is an error, not "no request", since what it asks is
// unknown and a write over it could weaken it. An unparsable one is no
// request, as everywhere.
func pendingForWrite(dir string) (restartRequest, bool, error) {
	path := filepath.Join(dir, RestartName)
	req, state, err := readState(path, parseRestart)
	switch {
	case state == fileCorrupt && unreadable(err):
		return restartRequest{}, false, fmt.Errorf("%w (the pending request cannot be read, so it is left as it is)", err)
	case state == fileCorrupt:
		infoOnce("restart:"+err.Error(), "runnerstate: ignoring a restart request that cannot be read", "path", path, "err", err)
	}
	if state != fileOK || req.void() {
		return restartRequest{}, false, nil
	}
	return req, true, nil
}

// readRestart reads restart.json. Anything unreadable or unparsable, or with
// an unknown mode, is no request (logged once).
func readRestart(dir string) (restartRequest, bool) {
	req, state, _ := readRestartState(dir)
	return req, state == fileOK
}

// readRestartState is readRestart with the file's state, and the error of a
// corrupt one, for Status to name.
func readRestartState(dir string) (restartRequest, fileState, error) {
	path := filepath.Join(dir, RestartName)
	req, state, err := readState(path, parseRestart)
	if state == fileCorrupt {
		infoOnce("restart:"+err.Error(), "runnerstate: ignoring a restart request that cannot be read", "path", path, "err", err)
	}
	return req, state, err
}

// parseRestart parses restart.json content.
func parseRestart(data []byte) (restartRequest, error) {
	var req restartRequest
	if err := durable.DecodeObject(data, &req); err != nil {
		return restartRequest{}, err
	}
	if ModeStrength(req.Mode) == 0 {
		return restartRequest{}, fmt.Errorf("unknown mode %q", req.Mode)
	}
	return req, nil
}

// RestartRequested reports the pending restart mode for dir, if any. A file
// that cannot be read or parsed counts as no request: a runner never exits on
// a request it cannot understand (the problem is logged once); so does a
// void one, left by a Takeover starter that has died. It never reports
// RestartLost, which is delivered only by WatchRestart inside the holding
// process. It takes no lock and creates nothing.
func RestartRequested(dir string) (mode string, ok bool) {
	if dir == "" {
		return "", false
	}
	req, ok := pendingRestart(dir)
	if !ok {
		return "", false
	}
	return req.Mode, true
}

// ClearRestart removes dir's restart request. It is idempotent: no request,
// or no dir, is not an error. Errors: a directory at restart.json, or the
// system's error, naming the path; ErrNotDurable when the request is gone
// (nobody sees it any more) but the directory could not be synced; a
// *BusyError naming .state.lock when another process held it for 30 s.
func ClearRestart(dir string) error {
	if err := ownDir("ClearRestart", dir); err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return withStateLock(dir, func(stateHeld) error { return public(durable.Remove(dir, RestartName)) })
}

// Retiring a request: three policies, one for each moment a request can stop
// being meant for anyone. Each runs under the state lock.

// retireOnAdmission removes, for self, a runner admitted by a call that began
// at since, a restart request that is not for it: one a takeover left for the
// runner it replaced, one made for another instance, or one made before
// since. An unparsable request is set aside.
func retireOnAdmission(dir string, self Identity, since time.Time) {
	path := filepath.Join(dir, RestartName)
	req, state, err := readState(path, parseRestart)
	switch {
	case state == fileAbsent:
		return
	case state == fileCorrupt:
		if !errors.Is(err, durable.ErrIsDir) {
			setAside(dir, RestartName, "file", err)
		}
		return
	}
	if req.Takeover || (req.For != "" && req.For != self.Instance) || req.RequestedAt.Before(since) || aheadOf(req.RequestedAt) {
		if err := durable.Remove(dir, RestartName); err == nil {
			logger().Info("runnerstate: retired a restart request meant for the previous runner", "path", path, "mode", req.Mode, "requested_at", req.RequestedAt)
		}
	}
}

// retireOnRelease removes, for a runner letting go, a restart request
// addressed to it (instance).
func retireOnRelease(dir, instance string) {
	if req, ok := readRestart(dir); ok && req.For == instance && instance != "" {
		durable.Remove(dir, RestartName)
	}
}

// retireOnClear removes, for ClearStale, a restart request addressed to any
// runner: holding the runner lock, that runner is gone. It reports whether
// one was removed, and why one that should be is still there.
func retireOnClear(dir string) (bool, error) {
	req, state, err := readState(filepath.Join(dir, RestartName), parseRestart)
	switch {
	case state == fileCorrupt && unreadable(err):
		return false, err // whom it addresses is unknown: it stays
	case state != fileOK || req.For == "":
		return false, nil
	}
	if err := durable.Remove(dir, RestartName); err != nil {
		return false, public(err)
	}
	return true, nil
}

// WatchRestart delivers dir's restart requests: one already pending when it
// starts, then each new request, or a stronger one than was last delivered
// ("now" after "drain"). The channel is closed when ctx ends. A request that
// cannot be parsed is never delivered, nor a void one (its Takeover starter
// has died): a request on offer is withdrawn within milliseconds of its
// starter's exit, which the starter's pidfd signals.
//
// In the process that holds dir (Acquire or Takeover), the holder is marked
// leaving before a mode is offered: runner.json is rewritten with Ready
// false and Leaving set to the mode (atomically, under the state lock, only
// while it names this process and never once the hold is being released),
// so that Start never hands out a runner that is going and Status shows it
// leaving. The mark of a request withdrawn before the runner read it is
// undone; once read, it stands, through later Publish calls, even when the
// request is withdrawn after (the runner has acted on it).
//
// In the process that holds dir, it also delivers RestartLost, once, as soon
// as a lock file of the hold is deleted, renamed or replaced, or dir itself
// is gone, whenever the watch started, before or after the loss: the runner
// must stop at once, since a next runner may be admitted beside it. There it also writes the holder's
// identity back into a lock file another program erased (an O_TRUNC open),
// so the holder stays verifiable.
//
// It wakes promptly on a change: on Linux through inotify on dir (one
// instance per process, docs/benchmarks.md says why), elsewhere by polling
// restart.json every 20 ms. Delivery waits for the receiver; what is offered
// is what is on disk at each moment, so requests that came and went while
// the receiver was busy are not replayed.
func WatchRestart(ctx context.Context, dir string) <-chan string {
	ch := make(chan string)
	if dir == "" {
		warnOnce("watch-empty", "runnerstate: WatchRestart was given an empty directory name; it delivers nothing")
		go func() {
			<-ctx.Done()
			close(ch)
		}()
		return ch
	}
	rw := &restartWatch{dir: dir, ch: ch, hold: holdOf(dir), w: dirwatch.New(dir)}
	go rw.run(ctx)
	return ch
}

// restartWatch is one WatchRestart.
type restartWatch struct {
	dir  string
	ch   chan string
	hold *hold.Hold // this process's hold on dir, looked up until there is one
	w    *dirwatch.Watcher

	last      restartRequest // the request delivered last
	delivered bool           // last is still pending
	lostSent  bool

	// The holder's leaving mark (markLeaving): kept is the mode delivered
	// last, which stands; offered is the mode on offer and marked, not yet
	// delivered, undone if it is withdrawn first.
	kept, offered string
}

// mark marks the holder leaving for offer before it is offered; nothing
// when this process does not hold dir.
func (rw *restartWatch) mark(ctx context.Context, offer string) {
	if rw.hold == nil || rw.offered == offer || rw.offered == "" && rw.kept == offer {
		return
	}
	markLeaving(ctx, rw.hold, offer)
	rw.offered = offer
}

// unmark undoes the mark of a mode that was on offer and was withdrawn, or
// whose watch ended, before the runner read it.
func (rw *restartWatch) unmark(ctx context.Context) {
	if rw.hold == nil || rw.offered == "" {
		return
	}
	unmarkLeaving(context.WithoutCancel(ctx), rw.hold, rw.offered, rw.kept)
	rw.offered = ""
}

// keep makes the mark of the mode just delivered stand.
func (rw *restartWatch) keep(offer string) {
	if rw.hold != nil {
		rw.kept, rw.offered = offer, ""
	}
}

func (rw *restartWatch) run(ctx context.Context) {
	defer close(rw.ch)
	defer rw.w.Close()
	tick := time.NewTicker(rw.w.Interval())
	defer tick.Stop()
	for {
		offer, req := rw.next()
		if offer == "" {
			rw.unmark(ctx) // withdrawn unread
			watchHook("idle")
			select {
			case <-rw.w.Changed():
			case <-tick.C:
			case <-ctx.Done():
				return
			}
			continue
		}
		rw.mark(ctx, offer) // before it is offered: never ready once told to go
		starter := rw.starterExit(ctx, req)
		watchHook("offer " + offer)
		select {
		case rw.ch <- offer:
			rw.keep(offer)
			if offer == RestartLost {
				rw.lostSent = true
			} else {
				rw.last, rw.delivered = req, true
			}
		case <-starter.Exited():
			watchHook("starter exited")
		case <-rw.w.Changed():
		case <-tick.C:
		case <-ctx.Done():
			starter.Stop()
			rw.unmark(ctx)
			return
		}
		starter.Stop()
	}
}

// testHookWatch, when set, is told what a WatchRestart does: "offer <mode>"
// when it starts offering, "starter exited" when the starter of the request
// on offer exits, "idle" when it has nothing to offer. Tests use it to wait
// for a state they cannot see.
var testHookWatch atomic.Pointer[func(event string)]

func watchHook(event string) {
	if fn := testHookWatch.Load(); fn != nil {
		(*fn)(event)
	}
}

// next is what to offer now, if anything: RestartLost first, once, when the
// hold lost a lock file; else the pending request when it is new.
func (rw *restartWatch) next() (string, restartRequest) {
	if rw.hold == nil {
		// A watch started before this process's Acquire or Takeover of
		// dir is that hold's watch as soon as the hold exists.
		rw.hold = holdOf(rw.dir)
	}
	if h := rw.hold; h != nil && !rw.lostSent {
		if lost, why := h.Lost(); lost {
			warnOnce(fmt.Sprintf("lost:%s:%d", h.Abs(), h.AcquiredAt().UnixNano()), "runnerstate: this runner lost its lock file; it must stop at once, since a next runner may be admitted beside it", "dir", rw.dir, "why", why)
			return RestartLost, restartRequest{}
		}
		h.Heal(maxLockContent)
	}
	req, ok := pendingRestart(rw.dir)
	switch {
	case !ok:
		rw.delivered = false // cleared, or void: the next request is new
		return "", restartRequest{}
	case rw.delivered && sameRequest(req, rw.last):
		return "", restartRequest{}
	}
	return req.Mode, req
}

// starterExit watches the exit of the starter that wrote req, a takeover
// request, while it is on offer; nothing for any other request. A starter
// that died between the read of the request and its pin is exited already.
func (rw *restartWatch) starterExit(ctx context.Context, req restartRequest) *liveness.ExitWatch {
	if !req.Takeover {
		return nil
	}
	p, v, _ := liveness.Pin(liveness.Identity(req.By))
	switch {
	case p != nil:
		return liveness.WatchExit(ctx, p, nil)
	case v == liveness.Dead || v == liveness.Stale:
		return liveness.ExitedAlready()
	}
	return nil
}

// sameRequest reports whether a and b are one request: the same mode, for
// the same runner, made at the same instant. The watcher compares so to
// deliver each request once, however often its file is rewritten (a request
// kept as it is by a weaker one, a rewrite of the same bytes).
func sameRequest(a, b restartRequest) bool {
	return a.Mode == b.Mode && a.For == b.For && a.RequestedAt.Equal(b.RequestedAt)
}

// MarkLeaving marks this process's hold of dir as going, for why (a word of
// the caller's: package daemon says "idle" and "closed"): from then on its
// runner.json says Ready false and Leaving why, so that Start and Status
// never take a runner that is going for a ready one, and a later Publish
// keeps the mark. WatchRestart marks a runner so for the restart it
// delivers; a runner that decides to go by itself calls MarkLeaving before
// it lets dir go. The record is rewritten under the state lock (waited for
// at most 30 s), only while it names this process and before the hold's
// release, and not synced; the mark holds even after the hold lost its lock
// file, when Publish refuses. A failure to write it is logged, not
// returned: the runner is going either way.
//
// Errors: ErrNotHolder (wrapped, naming the lock file) when this process
// does not hold dir; an empty why is refused, naming dir.
func MarkLeaving(dir, why string) error {
	if why == "" {
		return errorf("MarkLeaving %s: why is empty: say why the runner is going (for example \"idle\")", dir)
	}
	h := holdOf(dir)
	if h == nil {
		return fmt.Errorf("%w: %s", ErrNotHolder, filepath.Join(dir, LockName))
	}
	markLeaving(context.Background(), h, why)
	return nil
}

// markLeaving marks h's holder as going, for why (a restart mode,
// RestartLost, or package daemon's "idle" and "closed"): from now on its
// runner.json says Ready false and Leaving why, so that Start and Status
// never take a runner that is going for a ready one; a later Publish keeps
// the mark. why "" takes the mark back: the record gets its Ready again when
// the holder had published. The record is rewritten under the state lock,
// and only while it names h's process and h is not being released. It is
// not synced: a crash ends the runner, and the mark with it. An error is
// logged, never returned: the runner must learn it is asked to go whether
// or not its record says so.
func markLeaving(ctx context.Context, h *hold.Hold, why string) {
	dir := h.Dir()
	h.SetLeaving(why) // at once, whether or not the record can be written
	err := withStateLockCtx(ctx, dir, func(stateHeld) error {
		h.SetLeaving(why)
		if h.Ending() {
			return nil
		}
		rec, state, _ := readRecord(dir)
		if state != fileOK || !sameProcess(rec.Process, Identity(h.Self())) {
			return nil // not yet published, or no longer this holder's
		}
		rec.Leaving, rec.Ready = why, why == "" && h.Published()
		data, err := protocolLine(rec)
		if err != nil {
			return err
		}
		return public(durable.WriteVolatileToAll(dir, RecordName, data))
	})
	if err != nil && ctx.Err() == nil {
		logger().Warn("runnerstate: could not mark the runner leaving in its record; Start may hand it out until it goes", "dir", dir, "leaving", why, "err", err)
	}
}

// unmarkLeaving undoes a mark of why that the holder never learnt of (its
// request was withdrawn before the runner read it): the hold goes back to
// was (the mark it had before, "" for none), and so does its record.
func unmarkLeaving(ctx context.Context, h *hold.Hold, why, was string) {
	if h.Leaving() != why {
		return
	}
	markLeaving(ctx, h, was)
}
