package daemon

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// newGrace is how long ServeHTTP waits, before a drain's Shutdown, for a
// connection that sends no request: net/http's Shutdown closes one that has
// been new this long as idle.
const newGrace = 5 * time.Second

// ServeHTTP serves hs on every one of srv's listeners until srv leaves or
// ctx ends, and returns once hs is done. Call it once per Server, after
// Listen (before or after Ready), then Close the Server.
//
// Leaving for a drain, an idle exit or Close, it loses no request: every
// connection the listeners accepted before Leaving is answered. It waits
// until each has had its first request read (or closed, or sent nothing for
// 5 s), then calls hs.Shutdown, which finishes the requests in flight:
// Shutdown alone closes a connection accepted whose request it has not read
// yet (golang/go#75591), and its client sees the server hang up. Leaving
// for RestartNow or RestartLost (or a drain that turns into one), or ctx
// ending (SIGTERM, say), it stops at once: hs.Close. ctx also bounds the
// drain. It sets hs.ConnState, calling the one hs had.
//
// It returns nil once srv left or ctx ended; hs.Serve's error when a
// listener fails otherwise (then hs is closed).
func ServeHTTP(ctx context.Context, srv *Server, hs *http.Server) error {
	t := &connStates{born: map[net.Conn]time.Time{}, changed: make(chan struct{}, 1)}
	prev := hs.ConnState
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		t.set(c, st)
		if prev != nil {
			prev(c, st)
		}
	}
	errs := make(chan error, len(srv.lns))
	for _, l := range srv.lns {
		go func() { errs <- hs.Serve(l) }()
	}
	var failed error
	select {
	case <-srv.Leaving():
	case <-ctx.Done():
	case err := <-errs:
		if !srv.isLeaving() {
			failed = err
		}
		errs <- nil // counted again below
	}
	// From here no listener returns a connection; once every Serve has
	// returned, each connection it accepted is known to hs.ConnState.
	for _, l := range srv.lns {
		l.halt()
	}
	for range srv.lns {
		<-errs
	}
	if failed != nil || ctx.Err() != nil || srv.isUrgent() {
		hs.Close()
		return failed
	}
	if !t.awaitRead(ctx, srv.urgent) {
		hs.Close()
		return nil
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-srv.urgent:
			cancel()
		case <-sctx.Done():
		}
	}()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	return nil
}

// connStates follows when each connection of an http.Server became new,
// until it leaves StateNew.
type connStates struct {
	mu      sync.Mutex
	born    map[net.Conn]time.Time // the connections in StateNew
	changed chan struct{}
}

func (t *connStates) set(c net.Conn, st http.ConnState) {
	t.mu.Lock()
	if st == http.StateNew {
		t.born[c] = time.Now()
	} else {
		delete(t.born, c)
	}
	t.mu.Unlock()
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// awaitRead waits until no connection is new but for one that has sent
// nothing for newGrace. False when ctx ends or urgent closes first.
func (t *connStates) awaitRead(ctx context.Context, urgent <-chan struct{}) bool {
	for {
		t.mu.Lock()
		var wait time.Duration
		for _, born := range t.born {
			wait = max(wait, newGrace-time.Since(born))
		}
		t.mu.Unlock()
		if wait <= 0 {
			return true
		}
		timer := time.NewTimer(wait)
		select {
		case <-t.changed:
		case <-timer.C:
		case <-ctx.Done():
		case <-urgent:
		}
		timer.Stop()
		if ctx.Err() != nil || isClosed(urgent) {
			return false
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
