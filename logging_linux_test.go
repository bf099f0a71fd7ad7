package runnerstate

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client that autostarts its runner with Start, and set no logger, sees
// nothing from the package: "started the runner" goes only to a logger the
// caller set (StartOptions.Logger here).
func TestStartIsQuietWithoutALogger(t *testing.T) {
	def := captureDefault(t)
	dir := startDir(t)
	rec, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err)
	again, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err)
	assert.Equal(t, rec.PID, again.PID)
	require.NoError(t, RequestRestart(dir, RestartNow))
	eventually(t, "the runner is reaped", func() bool { return reaped(dir) })
	assert.Empty(t, def.String(), "a Start with no logger set says nothing")

	var did testharness.LogBuffer
	rec, err = Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{Logger: slog.New(slog.NewTextHandler(&did, nil))})
	require.NoError(t, err)
	assert.Contains(t, did.String(), "started the runner", "the caller's logger hears what Start did")
	assert.Contains(t, did.String(), "pid="+strconv.Itoa(rec.PID))
	require.NoError(t, RequestRestart(dir, RestartNow))
	eventually(t, "the runner is reaped", func() bool { return reaped(dir) })
	assert.Empty(t, belowWarn(def.String()), "nor slog.Default(), whatever the call's logger heard")
}

// A directory whose path leaves no room for its files under PATH_MAX
// (4096 bytes on Linux): the first thing said is the real error, a file of
// the directory whose name is too long (runner.lock for Start), not a
// warning that restart.json, read on the way, cannot be read; and no call
// says a word about restart.json, at any level, to a logger set or not.
func TestStartOnAPathOverPathMaxSaysTheRealError(t *testing.T) {
	def := captureDefault(t)
	dir := tempDir(t)
	const want = 4088 // under 4096 with its NUL, but not with "/runner.lock"
	for len(dir) < want {
		dir = filepath.Join(dir, strings.Repeat("d", min(200, want-len(dir)-1)))
	}
	require.NoError(t, os.MkdirAll(dir, 0o755), "the directory itself fits")
	require.Greater(t, len(filepath.Join(dir, LockName)), 4095)

	for _, logged := range []*testharness.LogBuffer{def, captureLog(t)} {
		_, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "open "+filepath.Join(dir, LockName)+": file name too long")
		assert.NotContains(t, logged.String(), RestartName, "Start: no word about restart.json")
		assert.Empty(t, spawns(t, dir), "nothing was started")
	}

	logged := captureLog(t)
	ctx := background(t)
	for _, c := range []struct {
		call string
		run  func() error
	}{
		{"Takeover", func() error { _, err := Takeover(ctx, dir, TakeoverOptions{}); return err }},
		{"Acquire", func() error { _, err := Acquire(dir); return err }},
		{"Running", func() error { _, _, err := Running(dir); return err }},
		{"Status", func() error { _, err := Status(dir); return err }},
		{"Standby", func() error { _, err := Standby(ctx, dir, StandbyOptions{}); return err }},
		{"ClearStale", func() error { _, _, err := ClearStale(dir); return err }},
		{"RequestRestart", func() error { return RequestRestart(dir, RestartNow) }},
	} {
		err := c.run()
		require.Error(t, err, c.call)
		assert.Contains(t, err.Error(), dir+"/", c.call)
		assert.Contains(t, err.Error(), "file name too long", c.call)
		assert.NotContains(t, logged.String(), RestartName, "%s: no word about restart.json", c.call)
	}
	assert.NotContains(t, def.String(), RestartName)
}
