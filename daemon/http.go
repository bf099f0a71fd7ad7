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
// until each request read has reached hs's handler, and each connection
// has sent its first (or closed, or sent nothing for 5 s), then calls
// hs.Shutdown, which finishes the requests in flight. Shutdown alone closes
// a connection whose request it has not read yet (golang/go#75591), or has
// read an instant before, and its client sees the server hang up. Leaving
// for RestartNow or RestartLost (or a drain that turns into one), or ctx
// ending (SIGTERM, say), it stops at once: hs.Close. ctx also bounds the
// drain. It sets hs's ConnState, ConnContext and Handler, each calling the
// one hs had. (A keep-alive connection that sends its next request as
// Shutdown closes it idle is the HTTP race clients retry, as with any
// Shutdown.)
//
// It returns nil once srv left or ctx ended; hs.Serve's error when a
// listener fails otherwise (then hs is closed).
func ServeHTTP(ctx context.Context, srv *Server, hs *http.Server) error {
	t := watchConns(hs)
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
	if !t.awaitHandled(ctx, srv.urgent) {
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

// connStates follows the connections of an http.Server whose request is
// not in its handler yet: a new one (since when), or one that has read a
// request (StateActive) that has not reached the handler.
type connStates struct {
	mu      sync.Mutex
	pending map[net.Conn]time.Time
	changed chan struct{}
}

// connKey is the context key under which a request's connection is.
type connKey struct{}

// watchConns wraps hs's ConnState, ConnContext and Handler to follow its
// connections.
func watchConns(hs *http.Server) *connStates {
	t := &connStates{pending: map[net.Conn]time.Time{}, changed: make(chan struct{}, 1)}
	prevState, prevCtx, handler := hs.ConnState, hs.ConnContext, hs.Handler
	if handler == nil {
		handler = http.DefaultServeMux
	}
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			t.update(c, true, time.Now())
		case http.StateActive:
			t.update(c, true, time.Time{})
		default:
			t.update(c, false, time.Time{})
		}
		if prevState != nil {
			prevState(c, st)
		}
	}
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, c)
		}
		return context.WithValue(ctx, connKey{}, c)
	}
	hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			t.update(c, false, time.Time{})
		}
		handler.ServeHTTP(w, r)
	})
	return t
}

// update marks c pending (since born, or since it was first pending when
// born is zero) or not.
func (t *connStates) update(c net.Conn, pending bool, born time.Time) {
	t.mu.Lock()
	switch {
	case !pending:
		delete(t.pending, c)
	case !born.IsZero():
		t.pending[c] = born
	default:
		if _, ok := t.pending[c]; !ok {
			t.pending[c] = time.Now()
		}
	}
	t.mu.Unlock()
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// awaitHandled waits until no connection is pending, but for one pending
// for newGrace (a connection that sends nothing). False when ctx ends or
// urgent closes first.
func (t *connStates) awaitHandled(ctx context.Context, urgent <-chan struct{}) bool {
	for {
		t.mu.Lock()
		var wait time.Duration
		for _, since := range t.pending {
			wait = max(wait, newGrace-time.Since(since))
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
