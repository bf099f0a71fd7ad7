// Package dirwatch wakes a goroutine when the files in a directory may have
// changed: at once through the kernel's change notification where there is
// one (inotify on Linux), and otherwise by looking again every PollInterval.
// A wake-up is a hint to look, never a description of what changed: the
// caller reads the files again each time.
package dirwatch

import (
	"context"
	"time"
)

// PollInterval is how often a Watcher without kernel notification wakes.
const PollInterval = 20 * time.Millisecond

// SafetyInterval is how often a Watcher with kernel notification wakes
// anyway, in case an event was dropped (an overflowed queue, a directory
// replaced under the watch).
const SafetyInterval = 250 * time.Millisecond

// Watcher wakes its caller when files in one directory may have changed. It
// is for one goroutine at a time.
type Watcher struct {
	notify *notifier // kernel notification, or nil: poll
	timer  *time.Timer
}

// New watches dir. It never fails: where the kernel cannot notify (no
// inotify, the watch limit reached, dir missing), the Watcher polls.
func New(dir string) *Watcher {
	return &Watcher{notify: openNotifier(dir)}
}

// Wait returns nil when something in the directory may have changed, when
// extra is signalled, or after at most limit (0: no limit of the caller's),
// and in any case after PollInterval (polling) or SafetyInterval (notified).
// It returns ctx.Err() when ctx ends first.
func (w *Watcher) Wait(ctx context.Context, limit time.Duration, extra <-chan struct{}) error {
	d := PollInterval
	if w.notify != nil {
		d = SafetyInterval
	}
	if limit > 0 && limit < d {
		d = limit
	}
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	var ev <-chan struct{}
	if w.notify != nil {
		ev = w.notify.events
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.timer.C:
	case <-ev:
	case <-extra:
	}
	return nil
}

// Changed is signalled when something in the directory may have changed, for
// a caller that waits on something else beside it; it is nil (never ready)
// where the Watcher polls. Look again at least every Interval in any case.
func (w *Watcher) Changed() <-chan struct{} {
	if w.notify == nil {
		return nil
	}
	return w.notify.events
}

// Interval is how long a caller waiting on Changed may go without looking:
// PollInterval without kernel notification, SafetyInterval with it.
func (w *Watcher) Interval() time.Duration {
	if w.notify == nil {
		return PollInterval
	}
	return SafetyInterval
}

// Close stops the watch and waits for its reader goroutine to exit.
func (w *Watcher) Close() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.notify != nil {
		w.notify.close()
	}
}
