// Package await is a wait for a holder to go: it wakes when the files of
// the holder's directory may have changed, when the holder process it
// follows exits, and when a periodic check of the caller's is due. What
// the holder is, and whether it has gone, the caller decides each time it
// wakes.
package await

import (
	"context"
	"time"

	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// Waiter is one wait. It is used by one goroutine.
type Waiter struct {
	w         *dirwatch.Watcher
	exited    chan struct{} // signalled when the followed process exits
	owner     *liveness.ExitWatch
	check     func() bool
	interval  time.Duration
	nextCheck time.Time
}

// New waits on dir. check, when not nil, is asked at once and then every
// interval (see Checked).
func New(dir string, interval time.Duration, check func() bool) *Waiter {
	return &Waiter{w: dirwatch.New(dir), exited: make(chan struct{}, 1), check: check, interval: interval, nextCheck: time.Now()}
}

// Follow wakes the wait when the process id exits: it pins id (a process
// that cannot be pinned is not followed) unless it follows id.PID already,
// and stops following the process it followed before.
func (w *Waiter) Follow(ctx context.Context, id liveness.Identity) {
	if w.owner != nil && w.owner.PID() == id.PID {
		return
	}
	w.owner.Stop()
	w.owner = nil
	if p, _, _ := liveness.Pin(id); p != nil {
		w.owner = liveness.WatchExit(ctx, p, w.exited)
	}
}

// Checked asks the check when it is due, and reports whether it returned
// true.
func (w *Waiter) Checked() bool {
	if w.check == nil || time.Now().Before(w.nextCheck) {
		return false
	}
	if w.check() {
		return true
	}
	w.nextCheck = time.Now().Add(w.interval)
	return false
}

// Wait returns nil when the directory may have changed, the followed
// process exited, or the check is due; ctx.Err() when ctx ends first.
func (w *Waiter) Wait(ctx context.Context) error {
	return w.w.Wait(ctx, w.untilCheck(), w.exited)
}

// untilCheck bounds the next wait by the next check (0: no bound).
func (w *Waiter) untilCheck() time.Duration {
	if w.check == nil {
		return 0
	}
	return max(time.Until(w.nextCheck), time.Millisecond)
}

// Close stops following and watching.
func (w *Waiter) Close() {
	w.owner.Stop()
	w.w.Close()
}
