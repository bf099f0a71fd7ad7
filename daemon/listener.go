package daemon

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// listener is one of a Server's listeners: the socket, which the server
// keeps open until its Close (to hand it over), and the Accept the caller
// sees, which stops when the server leaves.
type listener struct {
	net.Listener                // the socket
	s            *Server        // whose connections are counted
	ep           endpoint       // as configured
	file         socketFile     // the unix socket file this server may remove
	mu           sync.Mutex     //
	stop         bool           // Accept returns no connection any more
	paused       bool           // Accept blocks, returning nothing, until resumed or stopped
	resumed      chan struct{}  // closed when paused ends (resume, halt or Close)
	emptying     bool           // idle: Accept returns what is queued, then stops
	closed       bool           // the caller closed it
	inflight     sync.WaitGroup // Accept calls under way
	emptied      chan struct{}  // closed when emptying found the queue empty
}

// deadliner is a listener whose Accept a deadline can wake.
type deadliner interface{ SetDeadline(time.Time) error }

// Accept returns the next connection, wrapped so that the server counts it
// (for IdleTimeout) until it is closed; the connection it wraps is
// reachable through NetConn. Once the server is leaving, an error matching
// net.ErrClosed.
func (l *listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.stop || l.closed {
			l.mu.Unlock()
			return nil, l.closedError()
		}
		if l.paused {
			resumed := l.resumed
			l.mu.Unlock()
			<-resumed
			continue
		}
		if l.emptying {
			l.mu.Unlock()
			if c, ok := acceptQueued(l.Listener); ok {
				return l.s.track(c), nil
			}
			l.mu.Lock()
			if !l.stop {
				l.stop = true // what was queued has been returned
				close(l.emptied)
			}
			l.mu.Unlock()
			continue
		}
		l.inflight.Add(1)
		l.mu.Unlock()
		keepNonblocking(l.Listener)
		c, err := l.Listener.Accept()
		l.inflight.Done()
		if err == nil {
			return l.s.track(c), nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			l.mu.Lock()
			woken := l.stop || l.closed || l.emptying || l.paused
			l.mu.Unlock()
			if !woken {
				if d, ok := l.Listener.(deadliner); ok {
					d.SetDeadline(time.Time{}) // a deadline nothing wants now
				}
			}
			continue
		}
		return nil, err
	}
}

func (l *listener) closedError() error {
	return &net.OpError{Op: "accept", Net: l.ep.Network, Addr: l.Listener.Addr(), Err: fmt.Errorf("%w (the server is leaving)", net.ErrClosed)}
}

// Close ends Accept. Before the server leaves it closes the socket too;
// after, the socket stays open for the successor until the server's Close.
func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.unpauseLocked()
	leaving := l.stop || l.emptying || l.paused || l.s.isLeaving() || l.s.steppingDown()
	l.mu.Unlock()
	l.wake()
	if leaving {
		return nil
	}
	err := l.Listener.Close()
	l.file.remove()
	return err
}

// halt makes Accept return no connection from now on, and returns once
// every Accept under way has returned.
func (l *listener) halt() {
	l.mu.Lock()
	l.stop = true
	l.unpauseLocked()
	l.mu.Unlock()
	l.wake()
	l.inflight.Wait()
}

// pause makes Accept block, returning nothing, until resume (or halt, or
// Close), and returns once every Accept under way has returned: from then
// on this listener accepts nothing. A lingering server pauses while it
// hands its sockets over; a successor beside a lingering predecessor until
// it is ready.
func (l *listener) pause() {
	l.mu.Lock()
	if l.stop || l.closed || l.paused {
		l.mu.Unlock()
		return
	}
	l.paused, l.resumed = true, make(chan struct{})
	l.mu.Unlock()
	l.wake()
	l.inflight.Wait()
}

// resume lets a paused Accept accept again.
func (l *listener) resume() {
	l.mu.Lock()
	l.unpauseLocked()
	l.mu.Unlock()
}

// unpauseLocked ends a pause; l.mu is held.
func (l *listener) unpauseLocked() {
	if l.paused {
		l.paused = false
		close(l.resumed)
	}
}

// emptyQueue makes Accept return what is already queued and then stop, and
// returns once it has (or after bound, when nobody calls Accept).
func (l *listener) emptyQueue(bound time.Duration) {
	l.mu.Lock()
	if l.stop || l.closed {
		l.mu.Unlock()
		return
	}
	l.emptying = true
	l.mu.Unlock()
	l.wake()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-l.emptied:
	case <-t.C:
	}
	l.halt()
}

// wake makes a blocked Accept return at once.
func (l *listener) wake() {
	if d, ok := l.Listener.(deadliner); ok {
		d.SetDeadline(time.Unix(1, 0))
	}
}

// conn is a connection accepted through a Server's listener: the server
// counts it open until Close.
type conn struct {
	net.Conn
	s    *Server
	once sync.Once
}

// NetConn returns the connection this one wraps (as tls.Conn.NetConn does).
func (c *conn) NetConn() net.Conn { return c.Conn }

// Close closes the connection; the server counts it closed.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.s.untrack(c) })
	return err
}
