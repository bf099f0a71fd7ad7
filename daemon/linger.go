package daemon

import (
	"context"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// A server with Options.Linger, asked to drain by a starter that takes its
// sockets and can take a lingering predecessor, does not make new clients
// wait for its drain. It stops accepting (its listeners' Accept blocks),
// hands its sockets over, records itself in linger.json
// (runnerstate.WriteLingering) and lets the directory go at once; its
// successor is admitted without waiting for its exit. When the successor
// publishes Ready, Handed and then Leaving close, and the server serves the
// connections it holds until they end or Linger passes. A successor that
// dies, or whose Listen fails, before it is ready gives the directory back:
// the server takes it again (runnerstate.Retake) and accepts again.

// lingerPhase is where a server is in a lingering step-down.
type lingerPhase uint8

const (
	phaseServing   lingerPhase = iota // the directory's holder (or leaving as with Linger 0)
	phasePreparing                    // asked to drain: ending an older lingering server; still accepting
	phaseStepping                     // Accept blocked: handing over, writing linger.json
	phaseStepped                      // the hold let go: waiting for the successor's Ready
	phaseLingering                    // Leaving closed: serving what it holds, until Linger passes
)

// steppingDown reports whether a lingering step-down is under way or done.
func (s *Server) steppingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phase != phaseServing
}

// lingerGrace is Options.LingerGrace, or its default.
func (s *Server) lingerGrace() time.Duration {
	if s.opts.LingerGrace > 0 {
		return s.opts.LingerGrace
	}
	return 5 * time.Second
}

// lingerInstead is leave's first step: it reports whether why is taken
// care of by a lingering step-down, one that begins now (a drain the server
// may linger on) or one under way (why is then what it leaves for, as with
// Linger 0, if the step-down has not let the directory go yet).
func (s *Server) lingerInstead(why string) bool {
	s.mu.Lock()
	switch s.phase {
	case phasePreparing, phaseStepping:
		if why == runnerstate.RestartDrain {
			// Another drain (a newer starter's): the step-down under way
			// hands over to the newest starter when it does.
			s.mu.Unlock()
			return true
		}
		if reasonRank(why) > reasonRank(s.pendingWhy) || s.pendingWhy == "" {
			s.pendingWhy = why
		}
		if !isClosed(s.abort) {
			close(s.abort)
		}
		s.mu.Unlock()
		return true
	case phaseStepped, phaseLingering:
		s.mu.Unlock()
		return true // the directory is its successor's: nothing more to leave
	}
	try := why == runnerstate.RestartDrain && s.reason == "" && !s.noLinger && s.opts.Linger > 0 && s.ready && handsOver
	s.mu.Unlock()
	if !try {
		return false
	}
	succ, ok := s.lingerSuccessor()
	if !ok && s.drainStands() {
		s.log.Info("daemon: not lingering: no starter that takes a lingering predecessor waits, and the drain stands", "dir", s.dir)
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != phaseServing || s.reason != "" {
		return false
	}
	s.phase, s.pendingWhy = phasePreparing, ""
	s.abort, s.lingerCh = make(chan struct{}), make(chan struct{})
	if s.idle != nil {
		s.idle.Stop()
	}
	go s.linger(succ, s.lingerCh)
	return true
}

// lingerSuccessor is the starter this server may linger beside: the newest
// live one waiting, when it takes the sockets and said it can take a
// lingering predecessor.
func (s *Server) lingerSuccessor() (gate.Successor, bool) {
	succs := successors(s.dir)
	if len(succs) == 0 || succs[0].Admitted || !succs[0].Linger || succs[0].Rendezvous == s.rvAddr {
		return gate.Successor{}, false
	}
	return succs[0], true
}

// drainStands reports whether the drain this server was asked for stands
// with no starter to linger beside: the request is still pending (an
// operator's, or a starter's that takes no lingering predecessor). A
// takeover's request whose starter is gone is void: the server that would
// linger keeps the directory instead (point 4 of lingering: a successor
// that fails first gives the sockets back).
func (s *Server) drainStands() bool {
	_, pending := runnerstate.RestartRequested(s.dir)
	return pending
}

// aborted reports whether a reason to leave as with Linger 0 came.
func (s *Server) aborted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return isClosed(s.abort)
}

// linger steps down toward succ and then lingers; done is closed when the
// step-down has settled: given up, taken back, or over.
func (s *Server) linger(succ gate.Successor, done chan struct{}) {
	defer close(done)
	if !s.endOlderLingering() || s.aborted() {
		s.giveUpLinger()
		return
	}
	s.setPhase(phaseStepping)
	for _, l := range s.lns {
		l.pause()
	}
	// The newest starter now: a newer one may have come meanwhile, and the
	// one that asked may have been superseded and gone.
	handed := false
	for try := 0; try < 3 && !handed && !s.aborted(); try++ {
		newest, ok := s.lingerSuccessor()
		if !ok {
			break
		}
		succ, handed = newest, s.handToLinger(newest)
		if !handed {
			s.awaitExit(newest)
		}
	}
	switch {
	case s.aborted(), !handed && s.drainStands():
		s.giveUpLinger()
		return
	case !handed:
		// The starter that asked is gone, with nobody after it: step down
		// to nobody and take the directory back (afterStepDown), as from a
		// successor that failed.
		succ = gate.Successor{}
		s.log.Info("daemon: the starter that asked for the drain is gone; taking the directory back", "dir", s.dir)
	}
	now := time.Now()
	rec := runnerstate.Lingering{Since: now, Deadline: now.Add(s.opts.Linger), KillAt: now.Add(s.opts.Linger + s.lingerGrace()), Open: s.Open()}
	if err := runnerstate.WriteLingering(s.dir, rec); err != nil {
		s.log.Info("daemon: will not linger", "dir", s.dir, "err", err)
		s.giveUpLinger()
		return
	}
	s.stopWatching()
	s.mu.Lock()
	abort := isClosed(s.abort)
	if !abort {
		s.phase, s.released = phaseStepped, true
	}
	s.mu.Unlock()
	if abort {
		if err := runnerstate.RemoveLingering(s.dir); err != nil {
			s.log.Info("daemon: could not remove the lingering record", "dir", s.dir, "err", err)
		}
		s.startWatch()
		s.giveUpLinger()
		return
	}
	s.release()
	s.log.Info("daemon: stepped down to linger", "dir", s.dir, "to_pid", succ.PID, "open", rec.Open, "until", rec.Deadline)
	s.afterStepDown(rec)
}

// awaitExit waits, a second at most, for the exit of a starter whose
// rendezvous refused the sockets: one killed closes its sockets before its
// pid shows it gone, and the next look must not take it for live.
func (s *Server) awaitExit(succ gate.Successor) {
	g, _, _ := gate.Read(s.dir)
	for _, e := range g.Waiting {
		if e.Starter.Instance != succ.Instance {
			continue
		}
		p, _, _ := liveness.Pin(e.Starter)
		if p == nil {
			return
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p.Wait(ctx)
		return
	}
}

// setPhase sets the step-down's phase.
func (s *Server) setPhase(p lingerPhase) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

// giveUpLinger leaves as with Linger 0: for the drain, or for the stronger
// reason that came meanwhile.
func (s *Server) giveUpLinger() {
	s.mu.Lock()
	why := s.pendingWhy
	s.phase, s.noLinger = phaseServing, true
	s.mu.Unlock()
	s.leave(runnerstate.RestartDrain)
	if why != "" {
		s.leave(why)
	}
}

// handToLinger hands the sockets to succ.
func (s *Server) handToLinger(succ gate.Successor) bool {
	if !handTo(succ.Rendezvous, s.socks, true) {
		return false
	}
	s.mu.Lock()
	// Keyed as it waits, and as the gate lists it once admitted (Handover).
	s.sent[succ.Rendezvous+" "+succ.Instance], s.sent[succ.Rendezvous+" "], s.handedOut = true, true, true
	s.mu.Unlock()
	s.log.Info("daemon: handed the listening sockets over", "dir", s.dir, "to_pid", succ.PID, "lingering", true)
	return true
}

// endOlderLingering makes sure no other server lingers in the directory:
// one that does is asked to end at once (end "now"), waited for up to
// LingerGrace while this server goes on accepting, then killed. False when
// it is still alive then, or a reason to leave as with Linger 0 came.
func (s *Server) endOlderLingering() bool {
	old, ok, err := runnerstate.EndLingering(s.dir)
	if err != nil {
		s.log.Info("daemon: could not read the lingering record", "dir", s.dir, "err", err)
		return false
	}
	if !ok {
		return true
	}
	p, v, why := liveness.Pin(liveness.Identity(old.Holder))
	if p == nil {
		if v == liveness.Dead || v == liveness.Stale {
			return true
		}
		s.log.Info("daemon: will not linger: an older lingering server cannot be verified, so it is not signalled", "dir", s.dir, "pid", old.Holder.PID, "verdict", v.String(), "why", why)
		return false
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), s.lingerGrace())
	defer cancel()
	s.mu.Lock()
	abort := s.abort
	s.mu.Unlock()
	go func() {
		select {
		case <-abort:
			cancel()
		case <-ctx.Done():
		}
	}()
	if p.Wait(ctx) == nil {
		return true
	}
	if isClosed(abort) {
		return false
	}
	s.log.Info("daemon: the older lingering server outlived its grace: killing it", "dir", s.dir, "pid", old.Holder.PID)
	if err := p.Signal(liveness.SIGKILL); err != nil {
		return false
	}
	wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
	defer wcancel()
	if p.Wait(wctx) != nil {
		s.log.Info("daemon: will not linger: the older lingering server outlived SIGKILL by a second", "dir", s.dir, "pid", old.Holder.PID)
		return false
	}
	return true
}

// afterStepDown waits, the directory let go, for the successor's Ready
// (then lingers), or takes the directory back when the successor failed.
func (s *Server) afterStepDown(rec runnerstate.Lingering) {
	w := dirwatch.New(s.dir)
	defer w.Close()
	deadline := time.NewTimer(time.Until(rec.Deadline))
	defer deadline.Stop()
	update := time.NewTicker(time.Second)
	defer update.Stop()
	var exit *liveness.ExitWatch
	var watching string
	defer func() { exit.Stop() }()
	var closeNow <-chan struct{} // Close, once the deadline has passed: Close waits at most Linger
	for {
		if s.successorReady() {
			s.lingerOn(&rec, w, deadline, update)
			return
		}
		if s.tryRetake(&rec) {
			return
		}
		s.handToSuccessors() // a starter that came since the step-down, or one a failed retake leaves to
		if id := s.successorProcess(); id.Instance != watching {
			exit.Stop()
			exit, watching = nil, id.Instance
			if p, _, _ := liveness.Pin(id); p != nil {
				exit = liveness.WatchExit(context.Background(), p, nil)
			}
		}
		select {
		case <-w.Changed():
		case <-exit.Exited():
		case <-time.After(w.Interval()):
		case <-update.C:
			s.updateLingering(&rec)
		case <-deadline.C:
			// The successor is not ready by the deadline: what this server
			// holds is closed, but it keeps its copies of the sockets, to
			// give them back should the successor fail.
			s.log.Info("daemon: the linger deadline passed before the successor was ready: closing the connections it still holds", "dir", s.dir, "open", s.Open())
			s.cutAll()
			closeNow = s.closing
		case <-closeNow:
			return // Close hands the sockets on to a starter waiting, or closes its copies
		}
	}
}

// successorReady reports whether another process holds the directory and
// has published Ready.
func (s *Server) successorReady() bool {
	rec, held, _ := runnerstate.Running(s.dir)
	return held && rec.Usable() && rec.Process.Instance != runnerstate.Self().Instance
}

// successorProcess is the process whose exit may give the directory back:
// the newest live starter waiting, else the holder.
func (s *Server) successorProcess() liveness.Identity {
	g, _, _ := gate.Read(s.dir)
	if e, ok := g.NewestLive(); ok {
		return e.Starter
	}
	if rec, held, _ := runnerstate.Running(s.dir); held {
		return liveness.Identity(rec.Process)
	}
	return liveness.Identity{}
}

// tryRetake takes the directory back when its successor is gone: nobody
// holds it and no live starter waits. Then the server accepts again, and
// Leaving and Handed stay open.
func (s *Server) tryRetake(rec *runnerstate.Lingering) bool {
	if _, held, err := runnerstate.Running(s.dir); err != nil || held {
		return false
	}
	g, _, _ := gate.Read(s.dir)
	if _, waiting := g.NewestLive(); waiting {
		return false // a newer starter takes the sockets instead (afterStepDown hands them)
	}
	rec.Retaking = true
	if err := runnerstate.WriteLingering(s.dir, *rec); err != nil {
		s.log.Info("daemon: could not record the lingering server retaking", "dir", s.dir, "err", err)
	}
	s.mu.Lock()
	meta := s.meta
	s.mu.Unlock()
	release, err := runnerstate.Retake(s.dir, runnerstate.Record{Program: s.opts.Program, Version: s.opts.Version, Endpoints: s.bound, Meta: meta})
	if err != nil {
		rec.Retaking = false
		runnerstate.WriteLingering(s.dir, *rec)
		s.log.Info("daemon: could not take the directory back", "dir", s.dir, "err", err)
		return false
	}
	s.mu.Lock()
	s.release, s.released, s.phase = release, false, phaseServing
	s.sent, s.handedOut = map[string]bool{}, false
	s.mu.Unlock()
	s.startWatch()
	for _, l := range s.lns {
		l.resume()
	}
	s.log.Info("daemon: the successor failed before it was ready: took the directory back", "dir", s.dir)
	s.idleCheck()
	return true
}

// lingerOn is the lingering itself: the successor is ready, so Handed and
// Leaving close and the copies of the sockets with them; the connections
// held are served until they end, Linger passes, the record says end
// "now", or Close.
func (s *Server) lingerOn(rec *runnerstate.Lingering, w *dirwatch.Watcher, deadline *time.Timer, update *time.Ticker) {
	s.closeHanded()
	s.endLinger(true)
	rec.Handed, rec.Open = true, s.Open()
	if err := runnerstate.WriteLingering(s.dir, *rec); err != nil {
		s.log.Info("daemon: could not update the lingering record", "dir", s.dir, "err", err)
	}
	s.log.Info("daemon: handed over; lingering on the connections it holds", "dir", s.dir, "open", s.Open(), "until", rec.Deadline)
	for {
		select {
		case <-s.idleCh:
			s.updateLingering(rec)
			return
		case <-w.Changed():
			s.endIfAsked()
		case <-time.After(w.Interval()):
			s.endIfAsked() // where the watcher polls, Changed never comes
		case <-update.C:
			s.updateLingering(rec)
		case <-deadline.C:
			s.log.Info("daemon: the linger deadline passed: closing the connections it still holds", "dir", s.dir, "open", s.Open())
			s.cutAll()
		case <-s.closing:
			s.cutAll()
			return
		}
	}
}

// endIfAsked cuts the connections the server holds when its record says
// end "now" (a newer server would linger).
func (s *Server) endIfAsked() {
	if l, ok, _ := runnerstate.ReadLingering(s.dir); ok && l.End == runnerstate.LingerEndNow && l.Holder.Instance == runnerstate.Self().Instance {
		s.log.Info("daemon: a newer server asked this lingering one to end now", "dir", s.dir, "open", s.Open())
		s.cutAll()
	}
}

// endLinger closes Leaving (Reason RestartDrain) and the server's copies of
// the sockets; handed says a successor is ready with them.
func (s *Server) endLinger(handed bool) {
	s.mu.Lock()
	s.phase = phaseLingering
	if s.reason == "" {
		s.reason = runnerstate.RestartDrain
	}
	s.mu.Unlock()
	for _, l := range s.lns {
		l.halt()
	}
	s.closeLeaving()
	if handed {
		for _, l := range s.lns {
			l.Listener.Close()
		}
	}
}

// updateLingering writes the count of open connections into the record,
// when it changed.
func (s *Server) updateLingering(rec *runnerstate.Lingering) {
	if n := s.Open(); n != rec.Open {
		rec.Open = n
		if err := runnerstate.WriteLingering(s.dir, *rec); err != nil {
			s.log.Info("daemon: could not update the lingering record", "dir", s.dir, "err", err)
		}
	}
}

// closeStepped is Close for a server that stepped down: the connections
// it still holds are cut, a hand-over no successor finished is passed on to
// a starter waiting, the copies of the sockets are closed, and the
// lingering record removed.
func (s *Server) closeStepped() {
	s.endLinger(false)
	s.handToSuccessors()
	s.cutAll()
	for _, l := range s.lns {
		l.Listener.Close()
	}
	s.mu.Lock()
	handed := s.handedOut
	s.mu.Unlock()
	if handed {
		s.closeHanded()
	}
	if err := runnerstate.RemoveLingering(s.dir); err != nil {
		s.log.Info("daemon: could not remove the lingering record", "dir", s.dir, "err", err)
	}
	s.log.Info("daemon: closed", "dir", s.dir, "reason", s.Reason(), "lingered", true)
}

// besideLingering reports whether a lingering predecessor still holds
// copies of the sockets this server was handed: then it accepts nothing
// before Ready.
func (s *Server) besideLingering() bool {
	l, ok, _ := runnerstate.ReadLingering(s.dir)
	return ok && !l.Retaking && !l.Handed && l.Holder.Instance != runnerstate.Self().Instance
}

// reapLingering, for a ready holder, kills a lingering server that
// outlived its kill_at, and removes the record of one that is gone
// (runnerstate.ReapLingering), until Close or a step-down of its own.
func (s *Server) reapLingering() {
	for {
		next := runnerstate.ReapLingering(s.dir)
		if next.IsZero() {
			return
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-t.C:
		case <-s.reapStop:
			t.Stop()
			return
		}
		if s.steppingDown() {
			return
		}
	}
}
