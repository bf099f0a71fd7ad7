package runnerstate

import (
	"log/slog"
	"strconv"
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
