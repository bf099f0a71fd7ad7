package runnerstate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLastExit: a runner Start started and that was killed after it was
// ready is said in Status as "signal 9", with its program and its log's
// last lines, read without writing anything; the next admission keeps it
// in start.json, and a clean release after it leaves it as it was. A
// runner nobody of this library reaped ended "unknown".
func TestLastExit(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	cmd := startedRunner(dir, "")
	rec, err := Start(background(t), dir, cmd, StartOptions{})
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	eventually(t, "the runner is reaped", func() bool { return reaped(dir) })

	before, err := os.ReadFile(filepath.Join(dir, startName))
	require.NoError(t, err)
	r, err := Status(dir)
	require.NoError(t, err)
	require.NotNil(t, r.LastExit, "%+v", r)
	assert.Equal(t, "signal 9", r.LastExit.How)
	assert.Equal(t, rec.PID, r.LastExit.Process.PID)
	assert.Equal(t, rec.StartedAt, r.LastExit.Admitted)
	assert.Contains(t, r.LastExit.Log, "started "+strconv.Itoa(rec.PID))
	after, err := os.ReadFile(filepath.Join(dir, startName))
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "Status writes nothing")
	data, _ := json.Marshal(r)
	assert.Contains(t, string(data), `"last_exit":{`)

	// The next admission keeps it; a clean release leaves it.
	release, err := Acquire(dir)
	require.NoError(t, err)
	release()
	r, err = Status(dir)
	require.NoError(t, err)
	require.NotNil(t, r.LastExit)
	assert.Equal(t, "signal 9", r.LastExit.How)
	assert.Equal(t, rec.PID, r.LastExit.Process.PID)

	// A runner no process of this library reaped: unknown.
	c := startChild(t, "acquire", dir)
	c.Expect("acquired")
	c.Kill()
	eventually(t, "the lock is free", func() bool { _, held, _ := Running(dir); return !held })
	r, err = Status(dir)
	require.NoError(t, err)
	require.NotNil(t, r.LastExit)
	assert.Equal(t, c.PID(), r.LastExit.Process.PID)
	assert.Equal(t, "unknown", r.LastExit.How)
}

// TestLastExitQuotesOnlyItsOwnLines: a runner killed after it was ready,
// then a newer build that fails at start, twice, appending to the same
// runner.log: no Exit quotes another process's lines. Status says the
// last failure with its own lines; start.json keeps the killed runner's
// end with its lines only, and how it ended.
func TestLastExitQuotesOnlyItsOwnLines(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	cmd := startedRunner(dir, "")
	rec, err := Start(background(t), dir, cmd, StartOptions{})
	require.NoError(t, err)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	eventually(t, "the runner is reaped", func() bool { return reaped(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	var se *StartError
	for range 2 {
		_, err = Start(background(t), dir, startedRunner(dir, "die:3"), StartOptions{NoBackoff: true})
		require.ErrorAs(t, err, &se)
		require.Equal(t, 3, se.ExitCode)
	}
	own := func(e *Exit) {
		t.Helper()
		require.NotNil(t, e)
		for _, line := range e.Log {
			if pid, ok := strings.CutPrefix(line, "started "); ok {
				assert.Equal(t, strconv.Itoa(e.Process.PID), pid, "pid %d's exit quotes %q", e.Process.PID, line)
			}
		}
		assert.Contains(t, e.Log, "started "+strconv.Itoa(e.Process.PID))
	}
	r, err := Status(dir)
	require.NoError(t, err)
	own(r.LastExit)
	assert.Equal(t, se.PID, r.LastExit.Process.PID, "the last unclean end is the last failure")
	assert.Equal(t, "exit 3", r.LastExit.How)
	assert.Contains(t, r.LastExit.Log, "boom 3")

	// Its record still there, and its end not found (start.json as when
	// the failed starts were made beside it, held): Status computes it
	// again, with its lines only.
	a, ok := readAttempt(dir)
	require.True(t, ok)
	own(a.LastExit)
	require.NotNil(t, a.Over)
	over := *a.Over
	over.Found = false
	require.NoError(t, writeAttempt(dir, startAttempt{Seq: a.Seq, Log: a.Log, LogFrom: a.LogFrom, Began: a.Began, Over: &over, ExitCode: -1}))
	r, err = Status(dir)
	require.NoError(t, err)
	own(r.LastExit)
	assert.Equal(t, rec.PID, r.LastExit.Process.PID)
	assert.NotContains(t, r.LastExit.Log, "boom 3")
}
