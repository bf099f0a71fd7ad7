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
	assert.WithinDuration(t, time.Now().Add(250*time.Millisecond), se.RetryAt, 250*time.Millisecond)
	require.Len(t, spawns(t, dir), 2)

	// In the window: the last failure at once, whatever the command, for a
	// ctx without a deadline (or one before RetryAt).
	noDeadline, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	cmd := startedRunner(dir, "")
	_, err := Start(noDeadline, dir, cmd, StartOptions{})
	took := time.Since(began)
	require.ErrorAs(t, err, &se)
	assert.Nil(t, cmd.Process, "nothing started in the window")
	assert.Equal(t, 3, se.ExitCode, "the last failure's status")
	assert.Contains(t, se.LogTail, "boom 3")
	assert.Equal(t, 2, se.Failures)
	assert.True(t, time.Now().Before(se.RetryAt), "said before RetryAt")
	assert.Contains(t, se.Error(), "2 consecutive failed starts: no runner is started before "+se.RetryAt.Format(time.RFC3339Nano))
	t.Logf("the answer in the window took %s", took)
	r, err := Status(dir)
	require.NoError(t, err)
	assert.Equal(t, 2, r.StartFailures)
	assert.Equal(t, se.RetryAt, r.NextStart.Local().Round(0).In(se.RetryAt.Location()))

	// Another process's caller is told the same, and starts nothing.
	caller := startCallers(t, dir, "", 1)[0]
	caller.Expect("failed " + strconv.Itoa(se.PID) + " 3")
	require.Len(t, spawns(t, dir), 2)

	// NoBackoff starts at once; its failure is the third.
	_, err = Start(background(t), dir, startedRunner(dir, "die:3"), StartOptions{NoBackoff: true})
	require.ErrorAs(t, err, &se)
	require.Len(t, spawns(t, dir), 3)
	assert.Equal(t, 3, se.Failures)
	assert.WithinDuration(t, time.Now().Add(500*time.Millisecond), se.RetryAt, 500*time.Millisecond)

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
