package runnerstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
)

// The takeover gate: gate.json records the starters waiting in Takeover, in
// the order they came (a sequence number they share, never the wall clock),
// and the escalation of the current takeover attempt, so that the newest
// starter wins and the holder is signalled at most once per step however many
// starters come and go. It is read and written only under the directory's
// state lock, and written atomically but without fsync: it describes live
// processes, and after a power loss none of them is left.

// gateEntry is one waiting starter.
type gateEntry struct {
	Seq     uint64    `json:"seq"`
	Starter Identity  `json:"starter"`
	Since   time.Time `json:"since"`
}

// gateAttempt is the current takeover attempt against one holder.
type gateAttempt struct {
	For            string    `json:"for"` // the holder's instance ("" when it names none)
	PID            int       `json:"pid"`
	Mode           string    `json:"mode"`             // the restart mode requested
	FirstRequestAt time.Time `json:"first_request_at"` // the grace clock starts here
	TermAt         time.Time `json:"term_at,omitzero"` // SIGTERM sent
	KillAt         time.Time `json:"kill_at,omitzero"` // SIGKILL sent
}

// gateState is the content of gate.json.
type gateState struct {
	Seq      uint64       `json:"seq"`      // the last sequence number handed out
	Admitted uint64       `json:"admitted"` // the sequence number of the last starter admitted
	Waiting  []gateEntry  `json:"waiting"`
	Attempt  *gateAttempt `json:"attempt,omitempty"`
}

// unverifiableStarterTTL is how long a waiting starter whose liveness cannot
// be verified (another PID namespace) counts as waiting.
const unverifiableStarterTTL = time.Hour

// readGate reads gate.json; a missing or unreadable one is an empty gate (the
// problem is logged once, and the next writer replaces it).
func readGate(dir string) (gateState, string) {
	path := filepath.Join(dir, gateName)
	data, err := readHint(path, maxRecordSize)
	if err != nil {
		if isNotExist(err) {
			return gateState{}, ""
		}
		warnOnce("gate:"+path+err.Error(), "runnerstate: ignoring an unreadable takeover gate", "path", path, "err", err)
		return gateState{}, path + " cannot be read: " + err.Error()
	}
	g, err := parseGate(data)
	if err != nil {
		warnOnce("gate:"+path+string(data), "runnerstate: ignoring an unparsable takeover gate", "path", path, "err", err)
		return gateState{}, path + " cannot be parsed: " + err.Error()
	}
	return g, ""
}

func parseGate(data []byte) (gateState, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return gateState{}, errors.New("not a JSON object")
	}
	var g gateState
	if err := json.Unmarshal(data, &g); err != nil {
		return gateState{}, err
	}
	return g, nil
}

// live reports whether a waiting starter may still be waiting: its identity
// is verified alive, or cannot be verified and it came within the TTL.
func (e gateEntry) live() bool {
	v, _ := liveness.Check(liveness.Identity(e.Starter))
	switch v {
	case liveness.Self, liveness.Alive:
		return true
	case liveness.Dead, liveness.Stale:
		return false
	}
	return time.Since(e.Since) < unverifiableStarterTTL
}

// prune drops the entries of starters that are gone (a kill -9ed starter never
// blocks the others) and ends an attempt nobody waits for any more.
func (g *gateState) prune() {
	live := g.Waiting[:0]
	for _, e := range g.Waiting {
		if e.live() {
			live = append(live, e)
		}
	}
	clear(g.Waiting[len(live):])
	g.Waiting = live
	if len(g.Waiting) == 0 {
		g.Attempt = nil
	}
}

// newerThan reports whether a live starter came after seq, or one after seq
// was already admitted.
func (g *gateState) newerThan(seq uint64) bool {
	if g.Admitted > seq {
		return true
	}
	for _, e := range g.Waiting {
		if e.Seq > seq && e.live() {
			return true
		}
	}
	return false
}

// next hands out the next sequence number: above every number the gate
// knows (a hand-edited or corrupt gate.json may hold an admitted number above
// seq), and never wrapping: far up, with nobody waiting, it starts again.
func (g *gateState) next() uint64 {
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

// remove drops the entry with seq.
func (g *gateState) remove(seq uint64) {
	for i, e := range g.Waiting {
		if e.Seq == seq {
			g.Waiting = append(g.Waiting[:i], g.Waiting[i+1:]...)
			return
		}
	}
}

// updateGate runs fn on the gate under dir's state lock and writes the result
// back. fn runs with the lock held and may touch other state files with the
// *Locked helpers; it must not take the state lock itself.
func updateGate(ctx context.Context, dir string, fn func(g *gateState) error) error {
	return withStateLockCtx(ctx, dir, func() error { return updateGateLocked(dir, fn) })
}

func updateGateLocked(dir string, fn func(g *gateState) error) error {
	g, _ := readGate(dir)
	g.prune()
	if err := fn(&g); err != nil {
		return err
	}
	data, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return writeAtomicOpt(dir, gateName, append(data, '\n'), false)
}

// waitingStarters lists the live starters waiting in Takeover for dir, oldest
// first, and a warning when the gate file cannot be read.
func waitingStarters(dir string) ([]Identity, string) {
	g, warn := readGate(dir)
	var ids []Identity
	for _, e := range g.Waiting {
		if e.live() {
			ids = append(ids, e.Starter)
		}
	}
	return ids, warn
}
