package runnerstate

import (
	"context"
	"time"
)

// pollInterval is how often a dirWatcher without kernel notification looks
// again, and the safety net of one with it.
const pollInterval = 20 * time.Millisecond

// dirWatcher wakes its owner when files in a directory may have changed.
type dirWatcher struct {
	notify *dirNotify // kernel notification, or nil: poll
	timer  *time.Timer
}

func newDirWatcher(dir string) *dirWatcher {
	return &dirWatcher{notify: openDirNotify(dir)}
}

// wait returns when something in the directory may have changed, when extra
// is signalled, after at most max (or a poll interval without kernel
// notification, or the safety interval with it, whichever is shorter), or
// with ctx's error when ctx ends.
func (w *dirWatcher) wait(ctx context.Context, max time.Duration, extra <-chan struct{}) error {
	d := pollInterval
	if w.notify != nil {
		d = notifySafetyInterval
	}
	if max > 0 && max < d {
		d = max
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

func (w *dirWatcher) close() {
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.notify != nil {
		w.notify.close()
	}
}

// notifySafetyInterval is how often a watcher with kernel notification looks
// anyway, in case an event was lost (an overflowed queue, a directory replaced
// under the watch).
const notifySafetyInterval = 250 * time.Millisecond
