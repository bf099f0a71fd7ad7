package runnerstate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
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
