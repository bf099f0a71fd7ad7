// Package gate is the content of a takeover gate: the starters waiting to
// take one directory over, in the order they came (a sequence number they
// share, never the wall clock), and the escalation against the current
// holder as recorded (the grace clock, the signals sent), so that the
// newest starter wins and the holder is signalled at most once per step
// however many starters come and go.
//
// It records and never decides: when a signal is due is the caller's
// decision. It knows where the gate is kept (Name, in a runner directory)
// and reads it (Read), but not what serialises its writers: the caller
// reads a State, changes it and writes it back under a lock of its own.
package gate

import (
	"path/filepath"
	"slices"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/owner"
)

// Entry is one waiting starter.
type Entry struct {
	Seq     uint64            `json:"seq"`
	Starter liveness.Identity `json:"starter"`
	Since   time.Time         `json:"since"`
	// What the starter will run, as it said (both optional): a starter
	// that yields never goes ahead of one of the same Program with a newer
	// Version.
	Program string `json:"program,omitempty"`
	Version string `json:"version,omitempty"`
	// Rendezvous is where the starter receives the listening sockets of
	// the server it replaces ("" when it takes none): a unix socket
	// address, "@name" for an abstract one.
	Rendezvous string `json:"rendezvous,omitempty"`
	// Linger says the starter can take a lingering predecessor: one that
	// hands its sockets over, steps down and goes on serving the
	// connections it holds (package daemon's Options.Linger).
	Linger bool `json:"linger,omitempty"`
}

// Escalation is the takeover's escalation against one holder: what was
// asked, since when, and which signals were sent. gate.json keeps it under
// the member name "attempt", which the protocol fixes.
type Escalation struct {
	For            string    `json:"for"` // the holder's instance, "tree:orphans" against a gone runner's orphans ("" when it names none)
	PID            int       `json:"pid"`
	Mode           string    `json:"mode"`             // the restart mode requested
	FirstRequestAt time.Time `json:"first_request_at"` // the grace clock starts here
	TermAt         time.Time `json:"term_at,omitzero"` // SIGTERM sent
	KillAt         time.Time `json:"kill_at,omitzero"` // SIGKILL sent
}

// State is the whole gate.
type State struct {
	Seq        uint64      `json:"seq"`      // the last sequence number handed out
	Admitted   uint64      `json:"admitted"` // the sequence number of the last starter admitted
	Waiting    []Entry     `json:"waiting"`
	Escalation *Escalation `json:"attempt,omitempty"`
	// Handover is the rendezvous of the starter admitted last, which it
	// keeps open while it binds its listeners ("" when it has none).
	Handover string `json:"handover,omitempty"`
}

// UnverifiableTTL is how long a waiting starter whose liveness cannot be
// verified (another PID namespace) counts as waiting.
const UnverifiableTTL = time.Hour

// Name is the gate's file in a runner directory, and MaxSize the most of it
// Read reads.
const (
	Name    = "gate.json"
	MaxSize = 1 << 20
)

// Read reads dir's gate (Name, at most MaxSize bytes) with Parse:
// durable.ReadState's answer, an empty State unless it is durable.OK. A
// gate another user owns (owner.Evidence) is Absent: it binds nobody.
func Read(dir string) (State, durable.State, error) {
	path := filepath.Join(dir, Name)
	return durable.ReadStateOwned(path, MaxSize, Parse, func(id durable.FileID) bool { return owner.Evidence(path, id.UID) })
}

// Parse decodes a gate: one JSON object (durable.DecodeObject), or an error
// saying why not.
func Parse(data []byte) (State, error) {
	var g State
	err := durable.DecodeObject(data, &g)
	return g, err
}

// MaxAhead is how far after now an entry's date may be: a starter writes
// its own clock's now, so an entry dated later than that (2099, say) was
// written by no starter of this machine's clock, and binds nobody.
const MaxAhead = time.Minute

// Ahead reports whether t is more than MaxAhead after now.
func Ahead(t, now time.Time) bool { return t.After(now.Add(MaxAhead)) }

// Void reports whether the entry binds nobody, whatever its starter's
// verdict: it is dated more than MaxAhead after now.
func (e Entry) Void(now time.Time) bool { return Ahead(e.Since, now) }

// Live reports whether a waiting starter may still be waiting: it is not
// void, and its identity is verified alive, or cannot be verified and it
// came within UnverifiableTTL, counted from the earlier of its date and
// now (so a date a little ahead buys no time).
func (e Entry) Live() bool {
	now := time.Now()
	if e.Void(now) {
		return false
	}
	v, _ := liveness.Check(e.Starter)
	switch v {
	case liveness.Self, liveness.Alive:
		return true
	case liveness.Dead, liveness.Stale:
		return false
	}
	since := e.Since
	if since.After(now) {
		since = now
	}
	return now.Sub(since) < UnverifiableTTL
}

// Prune drops the entries of starters that are gone (a kill -9ed starter
// never blocks the others) and ends an escalation nobody waits for any more.
func (g *State) Prune() {
	live := g.Waiting[:0]
	for _, e := range g.Waiting {
		if e.Live() {
			live = append(live, e)
		}
	}
	clear(g.Waiting[len(live):])
	g.Waiting = live
	if len(g.Waiting) == 0 {
		g.Escalation = nil
	}
}

// NewerThan reports whether a live starter came after seq, or one after seq
// was already admitted.
func (g *State) NewerThan(seq uint64) bool {
	if g.Admitted > seq {
		return true
	}
	for _, e := range g.Waiting {
		if e.Seq > seq && e.Live() {
			return true
		}
	}
	return false
}

// Next hands out the next sequence number: above every number the gate
// knows (a hand-edited or corrupt gate may hold an admitted number above
// Seq), and never wrapping: far up, with nobody waiting, it starts again.
func (g *State) Next() uint64 {
	base := max(g.Seq, g.Admitted)
	for _, e := range g.Waiting {
		base = max(base, e.Seq)
	}
	if base >= 1<<62 && (len(g.Waiting) == 0 || base >= 1<<63) {
		g.Waiting = nil // only a forged gate gets this far with starters in it
		base, g.Admitted = 0, 0
	}
	g.Seq = base + 1
	return g.Seq
}

// Remove drops the entry with seq.
func (g *State) Remove(seq uint64) {
	for i, e := range g.Waiting {
		if e.Seq == seq {
			g.Waiting = append(g.Waiting[:i], g.Waiting[i+1:]...)
			return
		}
	}
}

// Join enters starter, which came at since, in the waiting list under the
// next sequence number (Next), and returns that number.
func (g *State) Join(starter liveness.Identity, since time.Time) uint64 {
	return g.JoinAs(Entry{Starter: starter, Since: since})
}

// JoinAs is Join for an entry that says more of its starter (Program,
// Version, Rendezvous); its Seq is set.
func (g *State) JoinAs(e Entry) uint64 {
	e.Seq = g.Next()
	g.Waiting = append(g.Waiting, e)
	return e.Seq
}

// Entry returns the entry with seq, if it is still there.
func (g *State) Entry(seq uint64) (Entry, bool) {
	for _, e := range g.Waiting {
		if e.Seq == seq {
			return e, true
		}
	}
	return Entry{}, false
}

// Newest is the newest live starter that came after seq; a zero Entry when
// there is none.
func (g *State) Newest(seq uint64) Entry {
	var newest Entry
	for _, e := range g.Waiting {
		if e.Seq > seq && e.Seq > newest.Seq && e.Live() {
			newest = e
		}
	}
	return newest
}

// Against makes the current escalation the one against the holder named
// by its instance (holder) and pid: the current one when it is against that
// holder, else a new one whose grace clock starts now.
func (g *State) Against(holder string, pid int, now time.Time) {
	if e := g.Escalation; e == nil || e.For != holder || e.PID != pid {
		g.Escalation = &Escalation{For: holder, PID: pid, FirstRequestAt: now}
	}
}

// Sent records sig as sent at now (TermAt or KillAt; nothing for 0), so
// that every starter of the escalation sees it was sent and none sends it
// again.
func (e *Escalation) Sent(sig liveness.Signal, now time.Time) {
	switch sig {
	case liveness.SIGTERM:
		e.TermAt = now
	case liveness.SIGKILL:
		e.KillAt = now
	}
}

// Successor is a starter that may receive a leaving server's listening
// sockets.
type Successor struct {
	PID        int    // the starter's process
	Instance   string // its instance
	Rendezvous string // where it receives them
	Admitted   bool   // the starter admitted last (it binds its listeners)
	Linger     bool   // it can take a lingering predecessor (Entry.Linger)
}

// NewestLive is the newest live starter waiting (Entry.Live), if any.
func (g *State) NewestLive() (Entry, bool) {
	for _, e := range slices.Backward(g.Waiting) {
		if e.Live() {
			return e, true
		}
	}
	return Entry{}, false
}

// Successors lists the live starters waiting that have a rendezvous, newest
// first, then the one admitted last (Handover), when it had one.
func (g *State) Successors() []Successor {
	var out []Successor
	for _, e := range slices.Backward(g.Waiting) {
		if e.Rendezvous != "" && e.Live() {
			out = append(out, Successor{PID: e.Starter.PID, Instance: e.Starter.Instance, Rendezvous: e.Rendezvous, Linger: e.Linger})
		}
	}
	if g.Handover != "" {
		out = append(out, Successor{Rendezvous: g.Handover, Admitted: true})
	}
	return out
}
