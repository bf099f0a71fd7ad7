//go:build unix || windows

package runnerstate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/bridge"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Program and Version: recorded with a waiting starter and at admission,
// checked against the holder's (ErrOtherProgram), and the yield rule that
// package daemon relies on.

// A starter's Program and Version are in the record written at admission
// and in every later Publish that leaves them empty.
func TestTakeoverRecordsProgramAndVersion(t *testing.T) {
	dir := tempDir(t)
	s := startStarter(t, dir, TakeoverOptions{Program: "idxd", Version: "v1.4.2"}, 0)
	s.Expect("admitted")
	rec, held, err := Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.Equal(t, "idxd", rec.Program)
	assert.Equal(t, "v1.4.2", rec.Version)
	assert.False(t, rec.Ready, "admitted, not yet published")

	release, err := Takeover(context.Background(), tempDir(t), TakeoverOptions{Program: "idxd", Version: "v2"})
	require.NoError(t, err)
	defer release()
}

// A directory held by another program is refused before anything is asked,
// signalled or written, by Takeover and Start alike, naming both programs.
func TestOtherProgramIsRefused(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	s := startStarter(t, dir, TakeoverOptions{Program: "idxd", Version: "v1"}, 0)
	s.Expect("admitted")

	_, err := Takeover(context.Background(), dir, TakeoverOptions{Program: "syncd"})
	require.ErrorIs(t, err, ErrOtherProgram)
	require.ErrorIs(t, err, ErrBusy)
	assert.Contains(t, err.Error(), `"idxd"`)
	assert.Contains(t, err.Error(), `"syncd"`)
	_, asked := RestartRequested(dir)
	assert.False(t, asked, "nothing was asked")
	g, _ := readGate(dir)
	assert.Empty(t, g.Waiting, "nothing was registered")

	_, err = Start(context.Background(), dir, testharness.Command(dir), StartOptions{Program: "syncd"})
	require.ErrorIs(t, err, ErrOtherProgram)
	require.ErrorIs(t, err, ErrBusy)
	_, err = os.Stat(filepath.Join(dir, "start.lock"))
	assert.ErrorIs(t, err, os.ErrNotExist, "Start created nothing")
}

// A starter that yields steps aside for a holder of the same program at a
// newer version, with an error of its own that matches ErrSuperseded and
// names the newer version; it asks nothing and registers nothing. At an
// older version it takes over as any starter does.
func TestYieldingStarterStepsAsideForANewerHolder(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	s := startStarter(t, dir, TakeoverOptions{Program: "idxd", Version: "v2"}, 0)
	s.Expect("admitted")
	yield := bridge.WithStarter(context.Background(), bridge.Starter{Yield: true})

	_, err := Takeover(yield, dir, TakeoverOptions{Program: "idxd", Version: "v1"})
	require.ErrorIs(t, err, ErrSuperseded)
	var ye *yieldError
	require.True(t, errors.As(err, &ye), "%T", err)
	assert.Contains(t, err.Error(), "stepped aside for a newer server")
	assert.Contains(t, err.Error(), "v2")
	_, asked := RestartRequested(dir)
	assert.False(t, asked, "nothing was asked")

	// Nor at the holder's own version: a client's copy never bounces a
	// deploy of its version.
	_, err = Takeover(yield, dir, TakeoverOptions{Program: "idxd", Version: "v2"})
	require.ErrorIs(t, err, ErrSuperseded, "the same version yields too")

	// Not yielding, or not older: it asks as any starter does.
	ctx, cancel := context.WithTimeout(yield, 200*time.Millisecond)
	defer cancel()
	_, err = Takeover(ctx, dir, TakeoverOptions{Program: "idxd", Version: "v3", NoSignal: true})
	require.ErrorIs(t, err, ErrBusy, "it waited for the holder (and withdrew when ctx ended)")
	assert.NotErrorIs(t, err, ErrSuperseded)
}

// A starter that yields steps aside for a waiting starter of the same
// program at a newer version, which the gate lists with both.
func TestYieldingStarterStepsAsideForANewerWaitingStarter(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	startRunner(t, dir, "")
	newer := startStarter(t, dir, TakeoverOptions{Program: "idxd", Version: "v2", NoSignal: true}, time.Minute)
	eventually(t, "the newer starter waits", func() bool {
		g, _ := readGate(dir)
		return len(g.Waiting) == 1
	})
	g, _ := readGate(dir)
	assert.Equal(t, "idxd", g.Waiting[0].Program)
	assert.Equal(t, "v2", g.Waiting[0].Version)

	yield := bridge.WithStarter(context.Background(), bridge.Starter{Yield: true, Rendezvous: "@test"})
	_, err := Takeover(yield, dir, TakeoverOptions{Program: "idxd", Version: "v1"})
	require.ErrorIs(t, err, ErrSuperseded)
	assert.Contains(t, err.Error(), "is taking it over")
	g, _ = readGate(dir)
	assert.Len(t, g.Waiting, 1, "the one that yielded never registered")
	newer.CloseStdin()
}
