package runnerstate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestRetryAfter: no wait after one failure, then 250 ms doubling with
// each consecutive failure, at most 30 s, whatever the count.
func TestRetryAfter(t *testing.T) {
	for k, want := range map[int]time.Duration{
		-1: 0, 0: 0, 1: 0,
		2: 250 * time.Millisecond, 3: 500 * time.Millisecond, 4: time.Second,
		8: 16 * time.Second, 9: 30 * time.Second, 10: 30 * time.Second,
		64: 30 * time.Second, 1 << 40: 30 * time.Second,
	} {
		assert.Equal(t, want, retryAfter(k), "k=%d", k)
	}
}

// TestBackoffRecord: only a failure that is not a step aside backs off;
// the count carries over to the next attempt until a child is ready; a
// failure's *StartError says the count and when the next start comes.
func TestBackoffRecord(t *testing.T) {
	end := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	failed := startAttempt{Seq: 3, Child: startAttempt{}.Child, Failed: true, Ended: end, Failures: 3, ExitCode: 1}
	assert.Equal(t, end.Add(500*time.Millisecond), failed.retryAt())
	assert.Equal(t, 3, failed.carried())
	e := failed.failure("/d")
	assert.Equal(t, 3, e.Failures)
	assert.Equal(t, end.Add(500*time.Millisecond), e.RetryAt)
	assert.Contains(t, e.Error(), "3 consecutive failed starts: no runner is started before 2026-12-04T00:00:00.5Z")

	aside := failed
	aside.Aside = true
	assert.Zero(t, aside.retryAt(), "a step aside holds nothing back")
	one := failed
	one.Failures = 1
	assert.Zero(t, one.retryAt())
	assert.Zero(t, one.failure("/d").Failures, "no backoff, no count said")
	ready := startAttempt{Seq: 4, Ready: true, Failures: 0}
	assert.Zero(t, ready.carried())
	settledReady := startAttempt{Seq: 4, Ended: end, Failures: 2}
	assert.Zero(t, settledReady.carried(), "ended without failing: it was ready")
	pending := startAttempt{Seq: 4, Failures: 2}
	assert.Equal(t, 2, pending.carried(), "a pending attempt carries the count before it")

	var a startAttempt
	a.Failures = 1
	a.fail(end, 2, "exit status 2", "panic: boom\n")
	assert.Equal(t, 2, a.Failures)
	a.Aside = true
	a.fail(end, 0, "", "")
	assert.Equal(t, 2, a.Failures, "a step aside is not counted")
}
