// Package handoff is one starter's wait for a directory another process
// holds: it tries the directory's pair of locks, and while they are busy it
// takes the step due against whoever holds them (asks, or signals on the
// schedule the starters share in their gate) and waits until the next step
// is due, the lock is free, a newer starter comes, or its context ends.
//
// What holds the directory, what a step is against, how a request is left
// and what is said about each step are the caller's: it gives them through
// a Protocol, and this package neither logs nor knows the directory's file
// names.
package handoff

import (
	"context"
	"errors"
	"time"

	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/holder"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/locktable"
)

// ErrNotNewest says a newer starter registered in the gate: this one
// steps aside.
var ErrNotNewest = errors.New("not the newest starter")

// ErrLost is Protocol.Enter's answer when a lock file of the pair was
// deleted or replaced before the entry completed: that pair guards
// nothing, and Run takes the files at the paths again.
var ErrLost = errors.New("a lock file was lost during admission")

// MaxLost bounds how often Run takes the pair again after Enter lost it:
// each time means somebody deletes lock files as fast as they are taken.
const MaxLost = 16

// Held is what a try of the pair found held.
type Held uint8

const (
	Free     Held = iota // both locks were taken
	LockHeld             // the directory's lock is held
	TreeHeld             // the lock was free, the tree lock held
)

// Whom is who a due signal goes to.
type Whom uint8

const (
	Nobody  Whom = iota // never signalled: the step only asks
	Holder              // the process Target.Holder, pinned, while it holds Target.Lock
	Orphans             // every process that holds Target.Lock now, each pinned and checked
)

// Target is what one step is against, as the caller reads the directory.
type Target struct {
	Key    string            // names the attempt in the gate: the holder's instance, or a name for orphans
	PID    int               // the holder's pid, when one is named
	Grace  time.Duration     // before SIGTERM, from the attempt's first request (gate.Unending: never)
	Ask    bool              // leave or upgrade a restart request (Protocol.Ask) under the gate's lock
	Signal Whom              // who a due signal goes to
	Holder liveness.Identity // for Holder: the process to pin
	Lock   string            // the lock file the signalled process must still hold
}

// Protocol is what a Wait needs from the directory, given by the caller
// that knows its files: P is its pair of locks, H what holding them makes
// of the starter. Its errors are returned to the Wait's caller as they
// are.
type Protocol[P, H any] interface {
	// Enter makes the starter the holder through p, once the previous
	// holder's process has exited (or KillAfter passed); ErrLost when a
	// lock file of p was lost meanwhile.
	Enter(ctx context.Context, p P) (H, error)
	// Lost is Run's answer when Enter lost the pair n times.
	Lost(n int) error
	// Try takes the pair of locks without waiting: the pair and Free, or
	// what it found held.
	Try() (P, Held, error)
	// Target reads what the step against held is against; ok is false when
	// it changed since the try (try again at once).
	Target(held Held) (t Target, ok bool, err error)
	// AwaitFree waits until the lock held names is free (it takes it and
	// lets it go: free), or ctx ends (not free, no error).
	AwaitFree(ctx context.Context, held Held) (free bool, err error)
	// ReadGate reads the gate; UpdateGate changes it under its lock.
	ReadGate() gate.State
	UpdateGate(ctx context.Context, fn func(g *gate.State) error) error
	// Ask leaves the restart request of g's attempt against pid, or
	// upgrades it; called under the gate's lock.
	Ask(g *gate.State, pid int) error
	// Orphans lists the processes that hold the tree lock now; complete is
	// false when some could not be read.
	Orphans() (pids []int, complete bool)
	// Busy is the answer when ctx ended (cause) while the pair was held;
	// Superseded the answer when a newer starter came.
	Busy(cause error) error
	Superseded() error
	// Report tells what a step did.
	Report(e Event)
}

// Event is one thing a Wait did, for the caller to tell.
type Event struct {
	What    What
	PID     int
	Signal  liveness.Signal
	Verdict liveness.Verdict // NotPinned: the holder's
	Why     string           // NotPinned: why it could not be pinned
	Err     error            // Signalled, OrphanSignalled: the signal's failure, if it failed
	Waited  time.Duration    // PreviousRunning
}

// What names an Event.
type What uint8

const (
	NotPinned       What = iota // the holder could not be pinned: it is not signalled
	HolderReleased              // a signal was due, but the holder had let go of the lock: not sent
	Signalled                   // the holder was signalled (or Err says why not)
	OrphansMissed               // the scan for orphans could not read every process
	OrphanSignalled             // an orphan was signalled (or Err says why not)
	PreviousRunning             // the previous holder let go but did not exit within KillAfter
)

// Wait is one starter's wait. It is used by one goroutine.
type Wait[P, H any] struct {
	Dir       string        // the directory, watched for newer starters
	Seq       uint64        // this starter's sequence number in the gate
	KillAfter time.Duration // from SIGTERM to SIGKILL, and how long Run waits for the previous holder to exit
	Protocol  Protocol[P, H]

	pinned *liveness.Process // the verified holder being taken over
}

// Run waits until the pair is this starter's (see pair), waits for the
// previous holder's process to exit, and enters; it takes the pair again
// when Enter lost it, at most MaxLost times.
func (w *Wait[P, H]) Run(ctx context.Context) (H, error) {
	var zero H
	supCtx, stop := w.newer(ctx)
	defer stop()
	for lost := 0; ; lost++ {
		p, err := w.pair(ctx, supCtx)
		if err != nil {
			return zero, err
		}
		w.awaitPrevious(ctx)
		h, err := w.Protocol.Enter(ctx, p)
		if err == ErrLost && lost < MaxLost {
			continue
		}
		if err == ErrLost {
			return zero, w.Protocol.Lost(lost + 1)
		}
		return h, err
	}
}

// newer returns a context that ends with ctx or as soon as a newer starter
// registers, so that a wait for the lock ends at once then; stop ends the
// watch.
func (w *Wait[P, H]) newer(ctx context.Context) (context.Context, func()) {
	return dirwatch.Until(ctx, w.Dir, func() bool {
		g := w.Protocol.ReadGate()
		return g.NewerThan(w.Seq)
	})
}

// pair tries the pair of locks and, while it is busy, takes the next step
// against whoever holds it and waits until that step is due, a newer
// starter comes (supCtx, from newer, ends), or ctx ends. An ended ctx gets
// its one try, never a request or a signal.
func (w *Wait[P, H]) pair(ctx, supCtx context.Context) (P, error) {
	var zero P
	for {
		if g := w.Protocol.ReadGate(); g.NewerThan(w.Seq) {
			return zero, w.Protocol.Superseded()
		}
		p, held, err := w.Protocol.Try()
		switch {
		case err != nil:
			return zero, err
		case held == Free:
			return p, nil
		case ctx.Err() != nil:
			return zero, w.Protocol.Busy(ctx.Err())
		}
		next, err := w.step(ctx, held)
		switch {
		case ctx.Err() != nil:
			return zero, w.Protocol.Busy(ctx.Err())
		case err == ErrNotNewest:
			return zero, w.Protocol.Superseded()
		case err != nil:
			return zero, err
		}
		waitCtx, cancel := context.WithDeadline(supCtx, next)
		free, err := w.Protocol.AwaitFree(waitCtx, held)
		cancel()
		switch {
		case free:
			// Free now (let go again): take the pair in its order.
		case err != nil:
			return zero, err
		case ctx.Err() != nil:
			return zero, w.Protocol.Busy(ctx.Err())
		}
		// A step is due, the lock was free, or a newer starter came: look
		// again.
	}
}

// step takes the step against what held names: the attempt is recorded,
// the request left, the due signal sent; it returns when the next step is
// due.
func (w *Wait[P, H]) step(ctx context.Context, held Held) (time.Time, error) {
	now := time.Now()
	t, ok, err := w.Protocol.Target(held)
	if err != nil || !ok {
		// Released, or changed, since the try: try again at once.
		return now, err
	}
	canSignal := t.Signal == Orphans || t.Signal == Holder && w.pin(t.Holder)
	due, next, err := w.decide(ctx, now, t, canSignal)
	if err != nil {
		return now, err
	}
	switch {
	case due == 0:
	case t.Signal == Holder:
		w.signal(due, t.Lock)
	case t.Signal == Orphans:
		w.signalOrphans(due, t.Lock)
	}
	return gate.Clamp(now, next, dirwatch.SafetyInterval), nil
}

// decide records this step in the gate, under its lock: the attempt (a
// new one when the holder changed), the restart request it asks for, and,
// when the holder may be signalled, the signal due now (recorded as sent)
// and when the next step is due. Admissions happen under this same lock,
// so a starter that is no longer the newest never asks or signals the
// holder just admitted: ErrNotNewest.
func (w *Wait[P, H]) decide(ctx context.Context, now time.Time, t Target, canSignal bool) (due liveness.Signal, next time.Time, err error) {
	err = w.Protocol.UpdateGate(ctx, func(g *gate.State) error {
		if g.NewerThan(w.Seq) {
			return ErrNotNewest
		}
		g.Against(t.Key, t.PID, now)
		if t.Ask {
			if err := w.Protocol.Ask(g, t.PID); err != nil {
				return err
			}
		}
		if !canSignal {
			return nil
		}
		due, next = g.Step(now, t.Grace, w.KillAfter)
		return nil
	})
	return due, next, err
}

// pin pins the holder id to signal it, keeping a pin already taken of the
// same process, and reports whether it is pinned.
func (w *Wait[P, H]) pin(id liveness.Identity) bool {
	if w.pinned != nil && w.pinned.PID() == id.PID {
		return true
	}
	if w.pinned != nil {
		w.pinned.Close()
	}
	p, v, why := liveness.Pin(id)
	w.pinned = p
	if p == nil {
		w.Protocol.Report(Event{What: NotPinned, PID: id.PID, Verdict: v, Why: why})
	}
	return p != nil
}

// signal sends sig to the pinned holder, which re-verifies it first, when it
// still holds the lock of lockPath.
func (w *Wait[P, H]) signal(sig liveness.Signal, lockPath string) {
	if w.pinned == nil {
		return
	}
	// The step was decided from a look taken before the gate update, which
	// may have waited for the gate's lock: the holder may have let go since.
	// Where the kernel lists lock holders, signal only a pinned process it
	// still names as the holder. (The kernel has no "signal if it holds the
	// lock"; what is left is the microseconds between this look and the
	// signal, against a process that is verified and pinned.)
	if !locktable.StillHolds(lockPath, w.pinned.PID()) {
		w.Protocol.Report(Event{What: HolderReleased, PID: w.pinned.PID(), Signal: sig})
		return
	}
	err := w.pinned.Signal(sig)
	w.Protocol.Report(Event{What: Signalled, PID: w.pinned.PID(), Signal: sig, Err: err})
}

// signalOrphans sends sig to every process that holds the tree lock at
// treePath now: each one found by a scan, pinned, and checked through the
// pin to hold it; a process that does not (a plain child, one that closed
// its copy, one with the file open but not locked) is never signalled.
func (w *Wait[P, H]) signalOrphans(sig liveness.Signal, treePath string) {
	pids, complete := w.Protocol.Orphans()
	if !complete {
		w.Protocol.Report(Event{What: OrphansMissed})
	}
	for _, pid := range pids {
		p := holder.Pinned(pid, treePath)
		if p == nil {
			continue
		}
		err := p.Signal(sig)
		w.Protocol.Report(Event{What: OrphanSignalled, PID: pid, Signal: sig, Err: err})
		p.Close()
	}
}

// awaitPrevious waits, at most KillAfter and never past ctx, for the
// pinned holder's process to exit: it released the lock, but may still be
// finishing its exit. The starter goes on either way.
func (w *Wait[P, H]) awaitPrevious(ctx context.Context) {
	p := w.pinned
	if p == nil {
		return
	}
	w.pinned = nil
	defer p.Close()
	wctx, cancel := context.WithTimeout(ctx, w.KillAfter)
	defer cancel()
	if err := p.Wait(wctx); err != nil && ctx.Err() == nil {
		w.Protocol.Report(Event{What: PreviousRunning, PID: p.PID(), Waited: w.KillAfter})
	}
}

// Close lets go of the pin on the holder, if any.
func (w *Wait[P, H]) Close() {
	if w.pinned != nil {
		w.pinned.Close()
		w.pinned = nil
	}
}
