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
// Remove and Prune drop entries, and Prune ends an attempt nobody waits for.
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
	g = State{Waiting: []Entry{{Seq: 1, Starter: dead, Since: time.Now().Add(-2 * UnverifiableTTL)}}, Attempt: &Attempt{PID: 1}}
	assert.False(t, g.Waiting[0].Live())
	g.Prune()
	assert.Empty(t, g.Waiting)
	assert.Nil(t, g.Attempt)
}

// TestParse: a gate written as JSON parses back; anything else is an error.
func TestParse(t *testing.T) {
	g, err := Parse([]byte(`{"seq":5,"admitted":3,"waiting":[{"seq":4,"starter":{"pid":10},"since":"2024-05-01T10:00:00Z"}],"attempt":{"for":"b","pid":11,"mode":"now","first_request_at":"2024-05-01T10:00:00Z"}}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(5), g.Seq)
	require.Len(t, g.Waiting, 1)
	assert.Equal(t, 10, g.Waiting[0].Starter.PID)
	assert.Equal(t, "now", g.Attempt.Mode)
	_, err = Parse([]byte(`[1]`))
	assert.Error(t, err)
}

// The escalation decision, as data: SIGTERM once Grace has passed since the
// attempt's first request, SIGKILL once KillAfter has passed since the
// SIGTERM, each once, and when to look again.
func TestEscalate(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	grace, killAfter := 5*time.Second, 3*time.Second
	sec := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }
	for _, tc := range []struct {
		name     string
		attempt  Attempt
		now      time.Time
		wantSig  liveness.Signal
		wantNext time.Time
	}{
		{"just asked", Attempt{FirstRequestAt: t0}, t0, 0, sec(5)},
		{"within grace", Attempt{FirstRequestAt: t0}, sec(4.9), 0, sec(5)},
		{"grace ended", Attempt{FirstRequestAt: t0}, sec(5), liveness.SIGTERM, sec(8)},
		{"long after grace", Attempt{FirstRequestAt: t0}, sec(60), liveness.SIGTERM, sec(63)},
		{"terminated, within kill-after", Attempt{FirstRequestAt: t0, TermAt: sec(5)}, sec(7), 0, sec(8)},
		{"kill-after ended", Attempt{FirstRequestAt: t0, TermAt: sec(5)}, sec(8), liveness.SIGKILL, time.Time{}},
		{"killed already", Attempt{FirstRequestAt: t0, TermAt: sec(5), KillAt: sec(8)}, sec(30), 0, time.Time{}},
		{"a clock that went back", Attempt{FirstRequestAt: t0, TermAt: sec(5)}, sec(1), 0, sec(8)},
	} {
		sig, next := Escalate(tc.attempt, tc.now, grace, killAfter)
		assert.Equal(t, tc.wantSig, sig, tc.name)
		assert.Equal(t, tc.wantNext, next, tc.name)
	}
}

// TestJoinNewestAgainstStep: a starter joins under the next number; the
// newest live starter after a number is found; an attempt is kept against
// the same holder and begun afresh against another; a step records the
// signal it decides as sent, so the next step does not send it again.
func TestJoinNewestAgainstStep(t *testing.T) {
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
	assert.Equal(t, t0, g.Attempt.FirstRequestAt, "the same holder keeps its attempt")
	g.Against("b", 11, t0.Add(time.Minute))
	assert.Equal(t, Attempt{For: "b", PID: 11, FirstRequestAt: t0.Add(time.Minute)}, *g.Attempt, "another holder begins a new one")

	start := g.Attempt.FirstRequestAt
	sig, _ := g.Step(start.Add(5*time.Second), 5*time.Second, 3*time.Second)
	assert.Equal(t, liveness.SIGTERM, sig)
	assert.Equal(t, start.Add(5*time.Second), g.Attempt.TermAt)
	sig, _ = g.Step(start.Add(6*time.Second), 5*time.Second, 3*time.Second)
	assert.Zero(t, sig, "SIGTERM is sent once")
	sig, _ = g.Step(start.Add(8*time.Second), 5*time.Second, 3*time.Second)
	assert.Equal(t, liveness.SIGKILL, sig)
	assert.Equal(t, start.Add(8*time.Second), g.Attempt.KillAt)
}
