//go:build unix || windows

package runnerstate

import (
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/stretchr/testify/assert"
)

// The escalation decision, as data: SIGTERM once the grace has passed
// since the escalation's first request, SIGKILL once KillAfter has passed
// since the SIGTERM, each once, and when to look again.
func TestEscalate(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	grace, killAfter := 5*time.Second, 3*time.Second
	sec := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Second))) }
	for _, tc := range []struct {
		name       string
		escalation gateEscalation
		now        time.Time
		wantSig    liveness.Signal
		wantNext   time.Time
	}{
		{"just asked", gateEscalation{FirstRequestAt: t0}, t0, 0, sec(5)},
		{"within grace", gateEscalation{FirstRequestAt: t0}, sec(4.9), 0, sec(5)},
		{"grace ended", gateEscalation{FirstRequestAt: t0}, sec(5), liveness.SIGTERM, sec(8)},
		{"long after grace", gateEscalation{FirstRequestAt: t0}, sec(60), liveness.SIGTERM, sec(63)},
		{"terminated, within kill-after", gateEscalation{FirstRequestAt: t0, TermAt: sec(5)}, sec(7), 0, sec(8)},
		{"kill-after ended", gateEscalation{FirstRequestAt: t0, TermAt: sec(5)}, sec(8), liveness.SIGKILL, time.Time{}},
		{"killed already", gateEscalation{FirstRequestAt: t0, TermAt: sec(5), KillAt: sec(8)}, sec(30), 0, time.Time{}},
		{"a clock that went back", gateEscalation{FirstRequestAt: t0, TermAt: sec(5)}, sec(1), 0, sec(8)},
	} {
		sig, next := escalate(tc.escalation, tc.now, grace, killAfter)
		assert.Equal(t, tc.wantSig, sig, tc.name)
		assert.Equal(t, tc.wantNext, next, tc.name)
	}
	sig, next := escalate(gateEscalation{FirstRequestAt: t0}, sec(3600), unending, killAfter)
	assert.Zero(t, sig, "an unending grace never escalates")
	assert.Zero(t, next)
}

// TestEscalateRecordedSendsEachSignalOnce: a step records the signal it
// decides as sent (gate.Escalation.Sent), so the next step does not send
// it again.
func TestEscalateRecordedSendsEachSignalOnce(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := gateEscalation{FirstRequestAt: start}
	step := func(now time.Time) liveness.Signal {
		sig, _ := escalate(e, now, 5*time.Second, 3*time.Second)
		e.Sent(sig, now)
		return sig
	}
	assert.Equal(t, liveness.SIGTERM, step(start.Add(5*time.Second)))
	assert.Equal(t, start.Add(5*time.Second), e.TermAt)
	assert.Zero(t, step(start.Add(6*time.Second)), "SIGTERM is sent once")
	assert.Equal(t, liveness.SIGKILL, step(start.Add(8*time.Second)))
	assert.Equal(t, start.Add(8*time.Second), e.KillAt)
	assert.Zero(t, step(start.Add(9*time.Second)), "SIGKILL is sent once")
}

// TestGraceFor: the grace each step gets, from the options and what holds
// the directory.
func TestGraceFor(t *testing.T) {
	drain := TakeoverOptions{Mode: RestartDrain}.withDefaults()
	now := TakeoverOptions{}.withDefaults()
	set := TakeoverOptions{Mode: RestartDrain, Grace: time.Minute}.withDefaults()
	for _, tc := range []struct {
		name string
		opts TakeoverOptions
		held heldLock
		occ  occupancy
		want time.Duration
	}{
		{"now, no grace", now, runnerLockHeld, occVerified, DefaultGrace},
		{"drain, no grace", drain, runnerLockHeld, occVerified, unending},
		{"drain, grace set", set, runnerLockHeld, occVerified, time.Minute},
		{"a lost lock file's runner, drain with no grace", drain, treeLockHeld, occLostFile, DefaultGrace},
		{"a lost lock file's runner, grace set", set, treeLockHeld, occLostFile, time.Minute},
		{"orphans", set, treeLockHeld, occOrphans, 0},
		{"orphans, drain", drain, treeLockHeld, occOrphans, 0},
	} {
		assert.Equal(t, tc.want, graceFor(tc.opts, tc.held, tc.occ), tc.name)
	}
}

// TestNextLook: the next look is at least a millisecond away and at most
// dirwatch.SafetyInterval, which is also the look when no step is left.
func TestNextLook(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	most := dirwatch.SafetyInterval
	assert.Equal(t, now.Add(most), nextLook(now, time.Time{}), "no step left")
	assert.Equal(t, now.Add(most), nextLook(now, now.Add(most+time.Hour)), "far away")
	assert.Equal(t, now.Add(time.Millisecond), nextLook(now, now.Add(-time.Second)), "overdue")
	assert.Equal(t, now.Add(most/2), nextLook(now, now.Add(most/2)))
}
