package gate

import (
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOrder: sequence numbers rise above everything the gate knows and
// never wrap; a live starter after seq, or an admission after it, is newer;
// Remove and Prune drop entries, and Prune ends an escalation nobody waits
// for.
func TestOrder(t *testing.T) {
	self := liveness.Current()
	g := State{Admitted: 7}
	assert.Equal(t, uint64(8), g.Next(), "above an admitted number")
	g.Waiting = []Entry{{Seq: g.Seq, Starter: self, Since: time.Now()}}
	assert.Equal(t, uint64(9), g.Next())
	g.Waiting = append(g.Waiting, Entry{Seq: g.Seq, Starter: self, Since: time.Now()})
	assert.True(t, g.NewerThan(8))
	assert.False(t, g.NewerThan(9))
	g.Remove(9)
	assert.False(t, g.NewerThan(8))
	assert.True(t, g.NewerThan(6), "admitted after 6")

	forged := State{Seq: 1 << 62}
	assert.Equal(t, uint64(1), forged.Next(), "far up with nobody waiting, it starts again")

	dead := self
	dead.StartTicks++ // another process instance: never alive, and long unverifiable where that is all it can be
	g = State{Waiting: []Entry{{Seq: 1, Starter: dead, Since: time.Now().Add(-2 * UnverifiableTTL)}}, Escalation: &Escalation{PID: 1}}
	assert.False(t, g.Waiting[0].Live())
	g.Prune()
	assert.Empty(t, g.Waiting)
	assert.Nil(t, g.Escalation)
}

// TestNewestLive: the newest waiting starter that is live, passing over a
// newer one that is gone; none when nobody live waits.
func TestNewestLive(t *testing.T) {
	self := liveness.Current()
	dead := self
	dead.StartTicks++
	old := time.Now().Add(-2 * UnverifiableTTL)
	g := State{Waiting: []Entry{{Seq: 1, Starter: self, Since: time.Now()}, {Seq: 2, Starter: dead, Since: old}}}
	e, ok := g.NewestLive()
	assert.True(t, ok)
	assert.Equal(t, uint64(1), e.Seq)
	g.Waiting = g.Waiting[1:]
	_, ok = g.NewestLive()
	assert.False(t, ok)
}

// TestParse: a gate written as JSON parses back; anything else is an error.
func TestParse(t *testing.T) {
	g, err := Parse([]byte(`{"seq":5,"admitted":3,"waiting":[{"seq":4,"starter":{"pid":10},"since":"2024-05-01T10:00:00Z"}],"attempt":{"for":"b","pid":11,"mode":"now","first_request_at":"2024-05-01T10:00:00Z"}}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(5), g.Seq)
	require.Len(t, g.Waiting, 1)
	assert.Equal(t, 10, g.Waiting[0].Starter.PID)
	assert.Equal(t, "now", g.Escalation.Mode)
	_, err = Parse([]byte(`[1]`))
	assert.Error(t, err)
}

// TestJoinNewestAgainstSent: a starter joins under the next number; the
// newest live starter after a number is found; an escalation is kept
// against the same holder and begun afresh against another; Sent records a
// signal as sent, and nothing for none.
func TestJoinNewestAgainstSent(t *testing.T) {
	self := liveness.Current()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var g State
	first := g.Join(self, t0)
	second := g.Join(self, t0)
	assert.Equal(t, []uint64{1, 2}, []uint64{first, second})
	assert.Equal(t, second, g.Newest(first).Seq)
	assert.Zero(t, g.Newest(second), "none after the newest")

	g.Against("a", 10, t0)
	g.Against("a", 10, t0.Add(time.Minute))
	assert.Equal(t, t0, g.Escalation.FirstRequestAt, "the same holder keeps its escalation")
	g.Against("b", 11, t0.Add(time.Minute))
	assert.Equal(t, Escalation{For: "b", PID: 11, FirstRequestAt: t0.Add(time.Minute)}, *g.Escalation, "another holder begins a new one")

	start := g.Escalation.FirstRequestAt
	g.Escalation.Sent(0, start.Add(time.Second))
	assert.Equal(t, Escalation{For: "b", PID: 11, FirstRequestAt: start}, *g.Escalation, "nothing sent, nothing recorded")
	g.Escalation.Sent(liveness.SIGTERM, start.Add(5*time.Second))
	assert.Equal(t, start.Add(5*time.Second), g.Escalation.TermAt)
	g.Escalation.Sent(liveness.SIGKILL, start.Add(8*time.Second))
	assert.Equal(t, start.Add(8*time.Second), g.Escalation.KillAt)
	assert.Equal(t, start.Add(5*time.Second), g.Escalation.TermAt, "SIGKILL leaves SIGTERM's time")
}

// TestAheadIsVoid: an entry dated more than MaxAhead after now binds
// nobody, whatever its starter's verdict (this very process's, here); one a
// little ahead does; an unverifiable starter's age counts from the earlier
// of its date and now.
func TestAheadIsVoid(t *testing.T) {
	self := liveness.Current()
	now := time.Now()
	forged := Entry{Seq: 2, Starter: self, Since: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)}
	assert.True(t, forged.Void(now))
	assert.False(t, forged.Live(), "a live starter's entry dated 2099 binds nobody")
	near := Entry{Seq: 3, Starter: self, Since: now.Add(MaxAhead / 2)}
	assert.False(t, near.Void(now))
	assert.True(t, near.Live())

	other := self
	other.PIDNS = "0:1" // another PID namespace: cannot be verified
	ahead := Entry{Seq: 4, Starter: other, Since: now.Add(MaxAhead / 2)}
	assert.True(t, ahead.Live(), "unverifiable, dated a little ahead: within the TTL")
	old := Entry{Seq: 5, Starter: other, Since: now.Add(-UnverifiableTTL - time.Minute)}
	assert.False(t, old.Live(), "unverifiable, older than the TTL")

	g := State{Waiting: []Entry{forged, near}}
	assert.False(t, g.NewerThan(1) && g.Newest(1).Seq == forged.Seq, "the void entry is never the newest")
	assert.Equal(t, near.Seq, g.Newest(1).Seq)
	g.Prune()
	assert.Equal(t, []Entry{near}, g.Waiting, "Prune drops the void entry")
}
