package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/bridge"
	"github.com/runnerstate/runnerstate/internal/dirwatch"
)

// Options says how a server takes its directory and what it offers.
type Options struct {
	// Program names what serves the directory (for example "idxd"). It is
	// published, and a directory whose holder names another program is
	// refused (runnerstate.ErrOtherProgram).
	Program string
	// Version is this build's version (for example "v1.4.2"): published,
	// and compared by Dial as a semantic version.
	Version string
	// Endpoints are what the server listens on, at least one. A "unix"
	// Address is relative to the directory unless absolute ("@name": a
	// Linux abstract socket); "tcp" ("tcp4", "tcp6") takes host:port, and
	// port 0 picks one, which a successor that inherits the socket keeps.
	// All a bind would refuse that can be known without binding (a path
	// too long, a port out of range, a host that is not this machine's)
	// is refused before the directory is taken over.
	// A unix socket file is given its Mode (0600 when 0) whatever the
	// umask, and again when it is handed over.
	Endpoints []runnerstate.Endpoint
	// Mode is asked of the server already there: runnerstate.RestartDrain
	// (the default) or runnerstate.RestartNow.
	Mode string
	// Grace and KillAfter are runnerstate.TakeoverOptions'. With a drain and
	// no Grace, the server already there is never signalled: Listen waits
	// for its drain until ctx ends.
	Grace, KillAfter time.Duration
	// IdleTimeout makes the server leave (Reason "idle") after this long
	// with no connection open that it accepted and no Busy call outstanding, counted
	// from Ready, the last such connection's close or the last Busy
	// release, whichever is latest. Zero: never.
	IdleTimeout time.Duration
	// Linger lets the server, on a drain toward a successor that takes its
	// sockets, hand them over and step down at once, then go on serving the
	// connections it had already accepted for at most this long, beside
	// its successor, rather than make new clients wait for the drain.
	// Only a server whose open connections need nothing exclusive in the
	// directory (state per connection, or behind a lock of its own, such
	// as a database's) may linger. Zero (the default): it never lingers,
	// and a drain is as it always was. Lingering is the server's choice,
	// made for a drain requested by a starter of this package that can
	// take a lingering predecessor; a drain by an operator, RestartNow,
	// Stop, an idle exit, a lost lock file, Close, or jobs the server
	// started that hold its tree each leave as with Linger zero. At most
	// one server lingers per directory: the next one to step down asks it
	// to end at once (its connections are closed). Linux and macOS, where
	// sockets are handed over; elsewhere it never lingers.
	// docs/operations.md says when to use it.
	Linger time.Duration
	// LingerGrace is how long past the Linger deadline a lingering server
	// has to exit before a holder or admission that finds it alive kills
	// it (SIGKILL; kill_at in linger.json), and how long a server that
	// would linger waits for an older lingering server it asked to end at
	// once before it kills it. Zero: 5 s.
	LingerGrace time.Duration
	// Logger receives what the server does (Info); nil: the runnerstate
	// package's logger (runnerstate.SetLogger; by default it passes only
	// warnings, to slog.Default()).
	Logger *slog.Logger
}

// Reasons a server leaves, besides the restart modes (Server.Reason).
const (
	ReasonIdle   = "idle"   // IdleTimeout passed
	ReasonClosed = "closed" // the server's Close
)

// envYield marks a server that Dial started: it steps aside for a newer
// server of its program (see Dial). Listen reads it and removes it from the
// environment.
const envYield = "RUNNERSTATE_DAEMON_YIELD"

// Server is a running server of a directory: its listeners, its record, and
// the signal to leave. Its methods are safe for concurrent use.
type Server struct {
	dir       string
	opts      Options
	release   func()
	lns       []*listener
	socks     []handable // the sockets as a successor is handed them, one per listener
	bound     []runnerstate.Endpoint
	rvAddr    string // the rendezvous this server came through
	inherited int    // listeners handed over by the server it replaced
	log       *slog.Logger

	leaving   chan struct{}
	urgent    chan struct{} // closed once the reason is RestartNow or RestartLost
	stopWatch context.CancelFunc
	watchDone chan struct{}
	handStop  chan struct{}
	handDone  chan struct{}

	handed   chan struct{} // Handed
	idleCh   chan struct{} // Idle
	lingerCh chan struct{} // closed when a lingering step-down has settled
	closing  chan struct{} // closed when Close begins
	abort    chan struct{} // closed when a reason to leave as with Linger 0 comes while it prepares to linger
	watchMu  sync.Mutex    // guards stopWatch and watchDone, which a retake renews
	reapStop chan struct{} // ends the reap of an older lingering server (Ready starts it)

	mu         sync.Mutex
	reason     string
	urgentSet  bool
	ready      bool
	meta       []byte             // the Ready payload, published again by a retake
	conns      int                // connections accepted and not closed
	openConns  map[*conn]struct{} // the connections counted in conns
	phase      lingerPhase
	pendingWhy string // the reason that aborted a step-down in preparation
	noLinger   bool   // a step-down was given up: this server leaves as with Linger 0
	released   bool   // the hold was let go at a step-down
	busy       int    // Busy calls not yet ended
	idle       *time.Timer
	sent       map[string]bool // the rendezvous the sockets went to
	handedOut  bool
	closeOnce  sync.Once
}

// Listen takes dir over and returns a Server whose listeners are open: those
// the server it replaced handed over, where there was one serving through
// this package (Linux and macOS), else bound anew. Until Ready, dir's record
// says Ready false, with Program, Version and Endpoints: runnerstate.Start
// and Dial wait for it. ctx bounds Listen only (the takeover and the binds),
// as net.ListenConfig.Listen's does: the server then lives until it leaves
// or Close.
//
// The takeover is runnerstate.Takeover's with opts' Mode, Grace, KillAfter,
// Program and Version. Sockets handed over are matched to opts.Endpoints by
// network and configured address; those not matched are closed before any
// bind. A unix socket file whose dial is refused is a dead server's, and is
// replaced; one where a server answers (after waiting about a second for
// a predecessor's sockets) or a path that is not a socket is refused.
//
// Errors, each naming what it is about: a bad endpoint (none, an unknown
// network, a unix path longer than the platform's sun_path, a TCP address
// whose syntax, port, family or host a bind would refuse: a host that is
// not an address of this machine) or Mode
// (runnerstate.ErrBadMode), before anything is taken or created;
// runnerstate.Takeover's (ErrOtherProgram, ErrSuperseded, a *BusyError when
// ctx ends); a bind that fails after admission, after dir is let go. A
// server that Dial started steps aside, with an error matching
// runnerstate.ErrSuperseded, for a newer server of its program.
func Listen(ctx context.Context, dir string, opts Options) (*Server, error) {
	eps, err := resolveEndpoints(ctx, dir, opts.Endpoints)
	if err != nil {
		return nil, err
	}
	if opts.Mode == "" {
		opts.Mode = runnerstate.RestartDrain
	}
	if runnerstate.ModeStrength(opts.Mode) == 0 {
		return nil, fmt.Errorf("daemon: Listen %s: %w, not %q", dir, runnerstate.ErrBadMode, opts.Mode)
	}
	yield := os.Getenv(envYield) == "1"
	os.Unsetenv(envYield)
	log := loggerOf(opts.Logger)

	rv := listenRendezvous()
	tctx := bridge.WithStarter(ctx, bridge.Starter{Rendezvous: rv.address(), Yield: yield, Linger: rv != nil})
	release, err := runnerstate.Takeover(tctx, dir, runnerstate.TakeoverOptions{
		Mode: opts.Mode, Grace: opts.Grace, KillAfter: opts.KillAfter,
		Program: opts.Program, Version: opts.Version, Logger: opts.Logger,
	})
	if err != nil {
		if errors.Is(err, runnerstate.ErrSuperseded) {
			passOn(dir, rv) // to the starter that superseded this one
		}
		rv.close()
		return nil, err
	}
	s := &Server{dir: dir, opts: opts, release: release, rvAddr: rv.address(), log: log,
		leaving: make(chan struct{}), urgent: make(chan struct{}), handStop: make(chan struct{}), handDone: make(chan struct{}), sent: map[string]bool{},
		handed: make(chan struct{}), idleCh: make(chan struct{}), lingerCh: make(chan struct{}), closing: make(chan struct{}), abort: make(chan struct{}), reapStop: make(chan struct{}),
		openConns: map[*conn]struct{}{}}
	beside := s.besideLingering()
	if err := s.open(eps, rv, beside); err != nil {
		rv.close()
		release()
		return nil, err
	}
	rv.close()
	if err := runnerstate.PublishNotReady(dir, runnerstate.Record{Program: opts.Program, Version: opts.Version, Endpoints: s.bound}); err != nil {
		s.closeSockets(true)
		release()
		return nil, err
	}
	if beside {
		// Its predecessor keeps copies of the sockets until this server is
		// ready: the predecessor's last accept comes before this one's first.
		for _, l := range s.lns {
			l.pause()
		}
	}
	s.startWatch()
	log.Info("daemon: listening", "dir", dir, "endpoints", s.bound, "handed_over", s.inherited)
	return s, nil
}

// open gives each endpoint its socket: the one handed over for it, else one
// bound anew. Beside a lingering predecessor, which keeps its copies, a
// socket not received yet is waited for (a second at most) first: a
// starter this one superseded may still pass it on.
func (s *Server) open(eps []endpoint, rv *rendezvous, beside bool) error {
	socks := make([]net.Listener, len(eps))
	closeAll := func() {
		for _, ln := range socks {
			if ln != nil {
				ln.Close()
			}
		}
	}
	for i, e := range eps {
		if r, ok := rv.take(e.key()); ok {
			socks[i] = r.ln
			s.inherited++
		} else if beside {
			if r, ok := rv.await(e.key(), time.Second); ok {
				socks[i] = r.ln
				s.inherited++
			}
		}
	}
	for _, r := range rv.all() {
		r.ln.Close() // handed over, and matching no endpoint of this server
	}
	for i, e := range eps {
		if socks[i] != nil {
			continue
		}
		ln, err := bind(e)
		if err != nil && rv != nil && (errors.Is(err, errAlive) || errors.Is(err, syscall.EADDRINUSE)) {
			// A starter this one superseded may still pass it the sockets.
			if r, ok := rv.await(e.key(), time.Second); ok {
				ln, err = r.ln, nil
				s.inherited++
			}
		}
		if err != nil {
			closeAll()
			return err
		}
		socks[i] = ln
	}
	for i, e := range eps {
		l := &listener{Listener: socks[i], s: s, ep: e, file: fileOf(e), emptied: make(chan struct{})}
		if ul, ok := socks[i].(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		s.lns = append(s.lns, l)
		s.socks = append(s.socks, handable{offer: offer{Network: e.Network, Address: e.Address, Bound: socks[i].Addr().String()}, ln: socks[i]})
		bound := runnerstate.Endpoint{Network: e.Network, Address: e.Address}
		if e.Network != "unix" {
			bound.Address = socks[i].Addr().String()
		} else if !e.abstract {
			mode, err := setSocketMode(e)
			if err != nil {
				closeAll()
				return err
			}
			bound.Mode = mode
		}
		s.bound = append(s.bound, bound)
	}
	return nil
}

// passOn hands the sockets a superseded starter received to the starter
// that superseded it, or the one admitted in its place, before they are
// closed.
func passOn(dir string, rv *rendezvous) {
	got := rv.all()
	if len(got) == 0 {
		return
	}
	socks := make([]handable, len(got))
	for i, r := range got {
		socks[i] = handable(r)
	}
	for _, succ := range successors(dir) {
		if succ.Rendezvous != rv.address() && handTo(succ.Rendezvous, socks, false) {
			break
		}
	}
	for _, r := range got {
		r.ln.Close()
	}
}

// Listeners returns the server's listeners, one per Options.Endpoints, in
// order: the same values for the server's life. Their Accept returns
// connections the server counts for IdleTimeout (NetConn returns the one
// each wraps), and an error matching net.ErrClosed once the server is
// leaving (while a lingering server steps down, Accept blocks instead).
// Closing one before the server leaves closes its socket; after, it only
// ends Accept: the socket stays open, for the successor, until Close.
func (s *Server) Listeners() []net.Listener {
	out := make([]net.Listener, len(s.lns))
	for i, l := range s.lns {
		out[i] = l
	}
	return out
}

// Ready publishes the server's record: Ready true, the Endpoints as bound
// (a unix socket's absolute path; the port picked for port 0), Program,
// Version and meta (the caller's own payload, at most about 1 MiB; nil for
// none). Start and Dial return the server from then on. A server that is
// leaving stays so (its record says Ready false), and nil is returned.
// Errors: runnerstate.Publish's.
func (s *Server) Ready(meta json.RawMessage) error {
	s.mu.Lock()
	released := s.released
	s.mu.Unlock()
	if released {
		return nil // it stepped down: the directory is its successor's
	}
	err := runnerstate.Publish(s.dir, runnerstate.Record{Program: s.opts.Program, Version: s.opts.Version, Endpoints: s.bound, Meta: meta})
	if err != nil {
		return err
	}
	s.mu.Lock()
	first := !s.ready
	s.ready, s.meta = true, append([]byte(nil), meta...)
	s.mu.Unlock()
	for _, l := range s.lns {
		l.resume() // ready: a lingering predecessor accepts no more
	}
	if first {
		go s.reapLingering()
	}
	s.idleCheck()
	return nil
}

// Leaving is closed when the server must go: a restart request (a
// successor's takeover leaves one), IdleTimeout, its lock file deleted or
// replaced, or Close. Before it closes, the record already says Ready
// false and Leaving (Reason), so Start and Dial never return a server that
// is going, and from then on the listeners return no connection. Then
// answer every connection they returned, its first request included, even
// one not read yet (Reasons RestartDrain, ReasonIdle, ReasonClosed), or stop
// at once (RestartNow, RestartLost), and call Close. ServeHTTP does so for
// an http.Server.
//
// A server that lingers (Options.Linger) is asked to drain and steps down
// first: its listeners' Accept blocks, returning nothing, while it hands
// over; Leaving closes (after Handed) once its successor is ready, and its
// record is its successor's by then. It never closes when the successor
// fails first: the server takes the directory back and Accept returns
// connections again. Serve what you hold until Idle, then Close: at the
// Linger deadline the library closes those connections itself.
func (s *Server) Leaving() <-chan struct{} { return s.leaving }

// Reason says why the server is leaving, once Leaving is closed:
// runnerstate.RestartDrain, RestartNow, RestartLost, ReasonIdle or
// ReasonClosed ("" before). A drain may be made stronger while it runs (a
// request to restart now, a lost lock file): Reason then says so.
func (s *Server) Reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Busy puts off IdleTimeout while work runs with no connection open: call
// done when it ends (once; more calls do nothing).
func (s *Server) Busy() (done func()) {
	s.mu.Lock()
	s.busy++
	if s.idle != nil {
		s.idle.Stop()
	}
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.busy--
			s.mu.Unlock()
			s.idleCheck()
		})
	}
}

// Close lets dir go: it leaves (Reason ReasonClosed, unless it was leaving
// already), hands the sockets to a starter waiting at this instant (one
// last pass), otherwise closes them, removing a unix socket file only while
// it is still the one this server's socket is bound to; then runner.json is
// removed and the hold released. Idempotent; safe after a lost lock file.
// Exit promptly after it: a successor's clients wait in the sockets'
// backlog until it is admitted, which is after this process's exit or its
// release, whichever the takeover waits for. A server that stepped down
// to linger has let dir go already: Close cuts the connections it still
// holds and removes its linger.json; during the step-down itself it first
// waits for the hand-over to end (the successor ready or gone, at most
// Linger).
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		close(s.reapStop)
		s.mu.Lock()
		phase, settled := s.phase, s.lingerCh
		if (phase == phasePreparing || phase == phaseStepping) && !isClosed(s.abort) {
			s.pendingWhy = ReasonClosed // it leaves as with Linger 0
			close(s.abort)
		}
		s.mu.Unlock()
		if phase != phaseServing {
			<-settled // the step-down settles: given up, handed over, or taken back
		}
		s.mu.Lock()
		released := s.released
		s.mu.Unlock()
		if released {
			s.closeStepped()
			return
		}
		s.leave(ReasonClosed)
		close(s.handStop)
		<-s.handDone
		s.handToSuccessors()
		s.mu.Lock()
		handed := s.handedOut
		s.mu.Unlock()
		s.closeSockets(!handed)
		s.stopWatching()
		s.release()
		if handed {
			s.closeHanded()
		}
		s.log.Info("daemon: closed", "dir", s.dir, "reason", s.Reason(), "handed_over", handed)
	})
	return nil
}

// closeSockets closes every socket, removing its file when removeFiles.
func (s *Server) closeSockets(removeFiles bool) {
	for _, l := range s.lns {
		l.halt()
		l.Listener.Close()
		if removeFiles {
			l.file.remove()
		}
	}
}

// startWatch starts turning restart requests and a lost lock file into
// leaving (watch), for the hold the server has now.
func (s *Server) startWatch() {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.watchMu.Lock()
	s.stopWatch, s.watchDone = stop, done
	s.watchMu.Unlock()
	go s.watch(ctx, done)
}

// stopWatching ends the watch and waits for it.
func (s *Server) stopWatching() {
	s.watchMu.Lock()
	stop, done := s.stopWatch, s.watchDone
	s.watchMu.Unlock()
	stop()
	<-done
}

// watch turns restart requests and a lost lock file into leaving.
func (s *Server) watch(ctx context.Context, done chan struct{}) {
	defer close(done)
	for mode := range runnerstate.WatchRestart(ctx, s.dir) {
		s.leave(mode)
	}
}

// reasonRank orders a server's reasons to leave (restart modes, a lost
// lock file, idle, closed): a higher one replaces a lower one in Reason. It
// is not the order of restart requests (runnerstate.ModeStrength), which
// never weaken one another and know no idle or closed.
func reasonRank(why string) int {
	switch why {
	case runnerstate.RestartDrain, ReasonIdle, ReasonClosed:
		return 1
	case runnerstate.RestartNow:
		return 2
	case runnerstate.RestartLost:
		return 3
	}
	return 0
}

// leave makes the server leave for why, once; a stronger why later only
// changes Reason.
func (s *Server) leave(why string) {
	if s.lingerInstead(why) {
		return
	}
	s.mu.Lock()
	if reasonRank(why) >= reasonRank(runnerstate.RestartNow) && !s.urgentSet {
		s.urgentSet = true
		close(s.urgent)
	}
	if s.reason != "" {
		if reasonRank(why) > reasonRank(s.reason) {
			s.reason = why
		}
		s.mu.Unlock()
		return
	}
	s.reason = why
	if s.idle != nil {
		s.idle.Stop()
	}
	s.mu.Unlock()
	if why == ReasonIdle || why == ReasonClosed {
		// Restart modes and a lost lock file are marked by WatchRestart.
		if err := runnerstate.MarkLeaving(s.dir, why); err != nil {
			s.log.Info("daemon: could not mark the server leaving", "dir", s.dir, "err", err)
		}
	}
	s.log.Info("daemon: leaving", "dir", s.dir, "reason", why)
	if why == ReasonIdle {
		s.leaveIdle()
		s.closeLeaving()
		close(s.handDone)
		return
	}
	for _, l := range s.lns {
		l.halt()
	}
	s.closeLeaving()
	if !handsOver {
		close(s.handDone)
		return
	}
	go s.handOver()
}

// leaveIdle makes the endpoints unreachable (a unix socket file is removed
// first), lets Accept return what is already queued, and closes the sockets.
func (s *Server) leaveIdle() {
	for _, l := range s.lns {
		l.file.remove()
	}
	var wg sync.WaitGroup
	for _, l := range s.lns {
		wg.Go(func() { l.emptyQueue(time.Second) })
	}
	wg.Wait()
	for _, l := range s.lns {
		l.Listener.Close()
	}
}

// handOver hands the sockets to each starter waiting for dir, from Leaving
// until Close, waking when the directory changes.
func (s *Server) handOver() {
	defer close(s.handDone)
	w := dirwatch.New(s.dir)
	defer w.Close()
	for {
		s.handToSuccessors()
		select {
		case <-s.handStop:
			return
		case <-w.Changed():
		case <-time.After(w.Interval()):
		}
	}
}

// handToSuccessors hands the sockets to each live starter waiting for dir,
// or admitted after this server, that has not had them yet.
func (s *Server) handToSuccessors() {
	if !handsOver || s.Reason() == ReasonIdle {
		return
	}
	for _, succ := range successors(s.dir) {
		key := succ.Rendezvous + " " + succ.Instance
		s.mu.Lock()
		done := s.sent[key] || succ.Rendezvous == s.rvAddr
		s.mu.Unlock()
		if done {
			continue
		}
		if handTo(succ.Rendezvous, s.socks, false) {
			s.mu.Lock()
			s.sent[key], s.handedOut = true, true
			s.mu.Unlock()
			s.log.Info("daemon: handed the listening sockets over", "dir", s.dir, "to_pid", succ.PID)
		}
	}
}

// track counts a connection accepted through a listener, open.
func (s *Server) track(c net.Conn) net.Conn {
	w := &conn{Conn: c, s: s}
	s.mu.Lock()
	s.conns++
	s.openConns[w] = struct{}{}
	if s.idle != nil {
		s.idle.Stop()
	}
	s.mu.Unlock()
	return w
}

// untrack counts c closed.
func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	s.conns--
	delete(s.openConns, c)
	none := s.conns == 0 && isClosed(s.leaving)
	s.mu.Unlock()
	if none {
		s.closeIdle()
	}
	s.idleCheck()
}

// Open is the number of connections the listeners accepted that are
// still open (not closed through the connection Accept returned).
func (s *Server) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// Idle is closed once Leaving has closed and no connection the listeners
// accepted is open: a server that serves a raw protocol can wait for it to
// drain, with no tracking of its own, then Close.
func (s *Server) Idle() <-chan struct{} { return s.idleCh }

// Handed is closed once this server's successor has its sockets: for a
// lingering server, when a holder admitted after its step-down publishes
// Ready (then Leaving closes); for any other, once a successor has been
// handed the sockets, at the latest when Close returns. It never closes
// when nothing took them.
func (s *Server) Handed() <-chan struct{} { return s.handed }

// closeLeaving closes Leaving, and Idle when no connection is open.
func (s *Server) closeLeaving() {
	s.mu.Lock()
	if isClosed(s.leaving) {
		s.mu.Unlock()
		return
	}
	close(s.leaving)
	none := s.conns == 0
	s.mu.Unlock()
	if none {
		s.closeIdle()
	}
}

func (s *Server) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !isClosed(s.idleCh) {
		close(s.idleCh)
	}
}

func (s *Server) closeHanded() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !isClosed(s.handed) {
		close(s.handed)
	}
}

// cutAll closes every connection the listeners accepted that is open.
func (s *Server) cutAll() {
	s.mu.Lock()
	open := make([]*conn, 0, len(s.openConns))
	for c := range s.openConns {
		open = append(open, c)
	}
	s.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

// isUrgent reports whether the server must stop at once (RestartNow,
// RestartLost).
func (s *Server) isUrgent() bool { return isClosed(s.urgent) }

// isLeaving reports whether the server has begun to leave.
func (s *Server) isLeaving() bool { return s.Reason() != "" }

// idleCheck starts the idle clock when the server is ready, has no
// connection open and no Busy call outstanding.
func (s *Server) idleCheck() {
	if s.opts.IdleTimeout <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready || s.conns > 0 || s.busy > 0 || s.reason != "" || s.phase != phaseServing {
		return
	}
	if s.idle == nil {
		s.idle = time.AfterFunc(s.opts.IdleTimeout, s.idleFired)
		return
	}
	s.idle.Reset(s.opts.IdleTimeout)
}

// idleFired leaves when the server is still idle.
func (s *Server) idleFired() {
	s.mu.Lock()
	idle := s.ready && s.conns == 0 && s.busy == 0 && s.reason == "" && s.phase == phaseServing
	s.mu.Unlock()
	if idle {
		go s.leave(ReasonIdle)
	}
}

// loggerOf is the caller's logger, or the runnerstate package's
// (runnerstate.SetLogger; by default warnings only, to slog.Default()).
func loggerOf(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return runnerstate.Logger()
}
