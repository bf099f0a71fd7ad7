package liveness

import "context"

// ExitWatch waits in its own goroutine for a pinned [Process] to exit, so
// that a loop can select on the exit beside its other events. Its methods
// are safe on a nil *ExitWatch, which never reports an exit.
type ExitWatch struct {
	p      *Process
	cancel context.CancelFunc
	done   chan struct{}
	gone   chan struct{}
}

// WatchExit starts waiting for p's exit until ctx ends or [ExitWatch.Stop].
// When the exit comes it closes the channel [ExitWatch.Exited] returns and,
// when exited is not nil, sends on exited without blocking (a full buffer
// drops the send). The ExitWatch owns p from then on: Stop closes it.
func WatchExit(ctx context.Context, p *Process, exited chan<- struct{}) *ExitWatch {
	ctx, cancel := context.WithCancel(ctx)
	e := &ExitWatch{p: p, cancel: cancel, done: make(chan struct{}), gone: make(chan struct{})}
	go func() {
		defer close(e.done)
		if p.Wait(ctx) == nil {
			close(e.gone)
			select {
			case exited <- struct{}{}:
			default:
			}
		}
	}()
	return e
}

// ExitedAlready returns an ExitWatch of a process known to be gone: its
// Exited channel is closed from the start.
func ExitedAlready() *ExitWatch {
	e := &ExitWatch{cancel: func() {}, done: make(chan struct{}), gone: make(chan struct{})}
	close(e.done)
	close(e.gone)
	return e
}

// Exited returns a channel closed when the process exits; nil (never ready)
// for a nil ExitWatch. A cancelled wait (ctx ended, Stop) never closes it.
func (e *ExitWatch) Exited() <-chan struct{} {
	if e == nil {
		return nil
	}
	return e.gone
}

// PID returns the watched process's pid: 0 for a nil ExitWatch and for one
// from [ExitedAlready].
func (e *ExitWatch) PID() int {
	if e == nil {
		return 0
	}
	return e.p.PID()
}

// Stop ends the wait, waits for its goroutine to return and closes the
// pinned Process. It is a no-op on a nil ExitWatch; call it once.
func (e *ExitWatch) Stop() {
	if e == nil {
		return
	}
	e.cancel()
	<-e.done
	if e.p != nil {
		e.p.Close()
	}
}
