package runnerstate

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartBackoff: after two consecutive failed starts, a caller, in this
// process or another, gets the last failure at once, with the count and
// when the next start comes, and nothing is started; Status shows both; a
// ctx whose deadline is later than RetryAt waits and tries once; NoBackoff
// starts at once; a runner that becomes ready resets the count.
func TestStartBackoff(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	var se *StartError
	for i := 1; i <= 2; i++ {
		_, err := Start(background(t), dir, startedRunner(dir, "die:3"), StartOptions{})
		require.ErrorAs(t, err, &se)
		require.Equal(t, 3, se.ExitCode, "failure %d", i)
	}
	assert.Equal(t, 2, se.Failures, "the second failure opens the window")
	assert.Equal(t, recordedEnd(t, dir).Add(250*time.Millisecond), se.RetryAt)
	require.Len(t, spawns(t, dir), 2)

	// NoBackoff starts at once; three more failures make the window 2 s
	// long, time enough for the checks below on a loaded machine.
	for k := 3; k <= 5; k++ {
		_, err := Start(background(t), dir, startedRunner(dir, "die:3"), StartOptions{NoBackoff: true})
		require.ErrorAs(t, err, &se)
		require.Len(t, spawns(t, dir), k)
		assert.Equal(t, k, se.Failures)
	}
	assert.Equal(t, recordedEnd(t, dir).Add(2*time.Second), se.RetryAt)

	// In the window: the last failure at once, whatever the command, for a
	// ctx without a deadline (or one before RetryAt).
	noDeadline, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	cmd := startedRunner(dir, "")
	_, err := Start(noDeadline, dir, cmd, StartOptions{})
	took := time.Since(began)
	require.ErrorAs(t, err, &se)
	require.True(t, began.Before(se.RetryAt), "the test's call came in the window")
	assert.Nil(t, cmd.Process, "nothing started in the window")
	assert.Equal(t, 3, se.ExitCode, "the last failure's status")
	assert.Contains(t, se.LogTail, "boom 3")
	assert.Equal(t, 5, se.Failures)
	assert.Contains(t, se.Error(), "5 consecutive failed starts: no runner is started before "+se.RetryAt.Format(time.RFC3339Nano))
	t.Logf("the answer in the window took %s", took)
	r, err := Status(dir)
	require.NoError(t, err)
	assert.Equal(t, 5, r.StartFailures)
	assert.True(t, r.NextStart.Equal(se.RetryAt), "%s, %s", r.NextStart, se.RetryAt)

	// Another process's caller is told the same, and starts nothing; on a
	// machine so loaded that it calls only once the window has ended, what
	// it starts is started after RetryAt.
	caller := startCallers(t, dir, "", 1)[0]
	switch said := caller.Expect(""); {
	case said == "failed "+strconv.Itoa(se.PID)+" 3":
		require.Len(t, spawns(t, dir), 5)
	case strings.HasPrefix(said, "ready "):
		t.Logf("the other process called Start after the window: %s", said)
		rec, held, err := Running(dir)
		require.NoError(t, err)
		require.True(t, held)
		assert.False(t, rec.StartedAt.Before(se.RetryAt), "started at %s, before RetryAt %s", rec.StartedAt, se.RetryAt)
	default:
		t.Fatalf("the other process's caller said %q", said)
	}

	// A deadline past RetryAt: wait, then one try, which is ready.
	ctx, cancelWait := context.WithDeadline(background(t), se.RetryAt.Add(childWait))
	defer cancelWait()
	retryAt := se.RetryAt
	rec, err := Start(ctx, dir, startedRunner(dir, ""), StartOptions{})
	require.NoError(t, err)
	assert.False(t, time.Now().Before(retryAt), "started only once the window ended")
	assert.True(t, rec.Ready)
	eventually(t, "the ready mark resets the count", func() bool {
		r, err := Status(dir)
		return err == nil && r.StartFailures == 0 && r.NextStart.IsZero()
	})
	data, err := os.ReadFile(filepath.Join(dir, startName))
	require.NoError(t, err)
	assert.False(t, strings.Contains(string(data), `"failures"`), "%s", data)
}

// recordedEnd is the end of dir's last attempt, as start.json says it.
func recordedEnd(t *testing.T, dir string) time.Time {
	a, ok := readAttempt(dir)
	require.True(t, ok)
	return a.Ended
}
