package daemon

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnerstate/runnerstate/internal/gate"
)

// A leaving server hands its listening sockets to its successor: the
// starters waiting for the directory each listen on a rendezvous (a unix
// socket whose address the gate lists with them, bridge.Starter), and the
// server sends each of them a copy of its sockets (SCM_RIGHTS) from its
// Leaving until its Close. docs/protocol.md specifies the exchange.

// successors lists the starters that may receive dir's sockets, as its gate
// records them (internal/gate State.Successors): the live starters waiting
// with a rendezvous, newest first, then the one admitted last. A gate that
// cannot be read lists none.
func successors(dir string) []gate.Successor {
	g, _, _ := gate.Read(dir)
	return g.Successors()
}

// offer is one socket handed over: the endpoint's key and the socket.
type offer struct {
	Network string `json:"network"`
	Address string `json:"address"` // as configured (resolved for unix): the match key
	Bound   string `json:"bound"`   // as bound
}

func (o offer) key() string { return o.Network + " " + o.Address }

// header is what precedes the descriptors of one handover.
type header struct {
	Protocol int     `json:"protocol"` // handoverProtocol
	From     int     `json:"from"`     // the sender's pid
	Sockets  []offer `json:"sockets"`  // one per descriptor, in order
	// Ack asks the receiver to answer one byte once it keeps the sockets
	// (v0.5): a server that steps down to linger lets the directory go
	// only then, since its successor, admitted at once, binds anew what it
	// has not received. An older receiver sends nothing: no ack.
	Ack bool `json:"ack,omitempty"`
}

const handoverProtocol = 1

// received is a socket a predecessor handed over.
type received struct {
	offer
	ln net.Listener
}

// rendezvous is where this starter receives a predecessor's sockets, while
// it waits to be admitted and while it binds.
type rendezvous struct {
	addr string
	ln   net.Listener

	mu     sync.Mutex
	got    map[string]received // by key, the newest copy
	closed bool
	more   chan struct{} // closed and replaced on each receipt
	done   chan struct{}
}

// listenRendezvous opens this starter's rendezvous; nil when this platform
// hands nothing over, or it cannot be opened (then the server binds anew).
func listenRendezvous() *rendezvous {
	ln, addr := openRendezvous()
	if ln == nil {
		return nil
	}
	rv := &rendezvous{addr: addr, ln: ln, got: map[string]received{}, more: make(chan struct{}), done: make(chan struct{})}
	go rv.serve()
	return rv
}

func (rv *rendezvous) serve() {
	defer close(rv.done)
	for {
		c, err := rv.ln.Accept()
		if err != nil {
			return
		}
		// One at a time: a handover is a few descriptors and a line.
		offers, lns, ack := receiveFrom(c)
		if fn := testHookReceived.Load(); fn != nil {
			(*fn)()
		}
		if rv.add(offers, lns) && ack {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			c.Write([]byte{1})
		}
		c.Close()
	}
}

// testHookReceived, when set, is called by a rendezvous between reading a
// handover and keeping its sockets: a test makes the receiver slow there,
// as a loaded machine can.
var testHookReceived atomic.Pointer[func()]

// add keeps the sockets received (a newer copy of one replaces the older),
// and reports whether it did: not once the rendezvous is closed.
func (rv *rendezvous) add(offers []offer, lns []net.Listener) bool {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	for i, o := range offers {
		if rv.closed {
			lns[i].Close()
			continue
		}
		if old, ok := rv.got[o.key()]; ok {
			old.ln.Close() // the same socket, as a predecessor's second pass
		}
		rv.got[o.key()] = received{offer: o, ln: lns[i]}
	}
	close(rv.more)
	rv.more = make(chan struct{})
	return !rv.closed && len(offers) > 0
}

// take removes and returns the socket received for key, if any.
func (rv *rendezvous) take(key string) (received, bool) {
	if rv == nil {
		return received{}, false
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	r, ok := rv.got[key]
	delete(rv.got, key)
	return r, ok
}

// await waits, at most d, for a socket for key.
func (rv *rendezvous) await(key string, d time.Duration) (received, bool) {
	if rv == nil {
		return received{}, false
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if r, ok := rv.take(key); ok {
			return r, true
		}
		rv.mu.Lock()
		more := rv.more
		rv.mu.Unlock()
		select {
		case <-more:
		case <-deadline.C:
			return received{}, false
		}
	}
}

// all removes and returns every socket received.
func (rv *rendezvous) all() []received {
	if rv == nil {
		return nil
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	out := make([]received, 0, len(rv.got))
	for k, r := range rv.got {
		out = append(out, r)
		delete(rv.got, k)
	}
	return out
}

// close stops receiving and closes what was received and not taken.
func (rv *rendezvous) close() {
	if rv == nil {
		return
	}
	rv.ln.Close()
	<-rv.done
	rv.mu.Lock()
	rv.closed = true
	rv.mu.Unlock()
	for _, r := range rv.all() {
		r.ln.Close()
	}
}

// address is the rendezvous's address for the gate ("" when none).
func (rv *rendezvous) address() string {
	if rv == nil {
		return ""
	}
	return rv.addr
}

// handable is a socket this server can hand over: its offer and listener.
type handable struct {
	offer
	ln net.Listener
}

// handTo sends the sockets to the rendezvous at addr; false when it could
// not (nobody listens there any more, or a peer that is not this user's),
// or, with ack, when the receiver did not say it keeps them.
func handTo(addr string, socks []handable, ack bool) bool {
	if len(socks) == 0 || addr == "" {
		return false
	}
	files := make([]*os.File, 0, len(socks))
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	h := header{Protocol: handoverProtocol, From: os.Getpid(), Ack: ack}
	for _, s := range socks {
		f, err := listenerFile(s.ln)
		if err != nil {
			return false
		}
		files = append(files, f)
		h.Sockets = append(h.Sockets, s.offer)
	}
	return sendTo(addr, h, files)
}
