//go:build unix || windows

package runnerstate

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordNow reads dir's runner.json as it is on disk.
func recordNow(t *testing.T, dir string) Record {
	t.Helper()
	rec, state, err := readRecord(dir)
	require.Equal(t, fileOK, state, "runner.json: %v", err)
	return rec
}

// WatchRestart marks the holder leaving before it offers a mode: the mark
// of a request withdrawn before the runner read it is undone; the mark of
// a request it read stands, through a later Publish and once the request
// is gone, and a stronger mode replaces it.
func TestWatchRestartMarksTheHolderLeaving(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, Publish(dir, Record{Specs: []string{"index"}}))
	ctx, cancel := context.WithCancel(context.Background())
	modes := WatchRestart(ctx, dir)
	testharness.EndWatch(t, cancel, modes)

	// Offered, not yet read: the record already says the runner is going.
	require.NoError(t, RequestRestart(dir, RestartDrain))
	eventually(t, "the record is marked leaving before the mode is read", func() bool {
		return recordNow(t, dir).Leaving == RestartDrain
	})
	assert.False(t, recordNow(t, dir).Ready)

	// Withdrawn unread: undone, ready again.
	require.NoError(t, ClearRestart(dir))
	eventually(t, "the mark of a request withdrawn unread is undone", func() bool {
		rec := recordNow(t, dir)
		return rec.Leaving == "" && rec.Ready
	})
	assert.Equal(t, []string{"index"}, recordNow(t, dir).Specs, "the rest of the record is kept")

	// Read: the mark stands once the request is gone, and through Publish.
	require.NoError(t, RequestRestart(dir, RestartDrain))
	select {
	case mode := <-modes:
		require.Equal(t, RestartDrain, mode)
	case <-time.After(childWait):
		t.Fatal("no mode delivered")
	}
	require.NoError(t, ClearRestart(dir))
	require.NoError(t, Publish(dir, Record{Specs: []string{"draining"}}))
	rec := recordNow(t, dir)
	assert.Equal(t, RestartDrain, rec.Leaving, "a later Publish keeps the mark")
	assert.False(t, rec.Ready, "a leaving runner is never ready again")
	assert.Equal(t, []string{"draining"}, rec.Specs)
	got, held, err := Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.Equal(t, RestartDrain, got.Leaving)

	// A stronger mode replaces it.
	require.NoError(t, RequestRestart(dir, RestartNow))
	select {
	case mode := <-modes:
		require.Equal(t, RestartNow, mode)
	case <-time.After(childWait):
		t.Fatal("no stronger mode delivered")
	}
	assert.Equal(t, RestartNow, recordNow(t, dir).Leaving)
}

// A Publish never sets Leaving itself: it is the library's mark.
func TestPublishIgnoresACallersLeaving(t *testing.T) {
	dir := tempDir(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, Publish(dir, Record{Leaving: RestartNow}))
	rec := recordNow(t, dir)
	assert.Empty(t, rec.Leaving)
	assert.True(t, rec.Ready)
}

// RestartLost is no mode anyone can ask for.
func TestRestartLostIsNoRequest(t *testing.T) {
	dir := tempDir(t)
	assert.True(t, errors.Is(RequestRestart(dir, RestartLost), ErrBadMode))
	writeJSON(t, filepath.Join(dir, RestartName), restartRequest{Mode: RestartLost, RequestedAt: time.Now()})
	_, ok := RestartRequested(dir)
	assert.False(t, ok, "a file that names it is not a request")
	assert.False(t, strings.Contains(RestartLost, " "))
}

// MarkLeaving marks the holder's record leaving for the caller's word: not
// ready, through a later Publish; it refuses an empty word, and a process
// that does not hold dir.
func TestMarkLeaving(t *testing.T) {
	dir := tempDir(t)
	assert.ErrorIs(t, MarkLeaving(dir, "idle"), ErrNotHolder)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, Publish(dir, Record{Specs: []string{"index"}}))

	err = MarkLeaving(dir, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), dir)
	assert.True(t, recordNow(t, dir).Ready, "an empty word marks nothing")

	require.NoError(t, MarkLeaving(dir, "idle"))
	rec := recordNow(t, dir)
	assert.Equal(t, "idle", rec.Leaving)
	assert.False(t, rec.Ready)
	require.NoError(t, Publish(dir, Record{Specs: []string{"index"}}))
	rec = recordNow(t, dir)
	assert.Equal(t, "idle", rec.Leaving, "a later Publish keeps the mark")
	assert.False(t, rec.Ready)
}

// TestModeStrength: the order of the modes a request may ask for, and 0
// (ErrBadMode) for every other word, RestartLost and daemon's reasons
// included; RequestRestart and Takeover refuse exactly those.
func TestModeStrength(t *testing.T) {
	dir := tempDir(t)
	for mode, want := range map[string]int{RestartNow: 2, RestartDrain: 1, RestartLost: 0, "idle": 0, "closed": 0, "": 0, "Now": 0} {
		assert.Equal(t, want, ModeStrength(mode), "%q", mode)
		if want == 0 {
			assert.ErrorIs(t, RequestRestart(dir, mode), ErrBadMode, "%q", mode)
			if mode != "" { // Takeover's default mode
				_, err := Takeover(context.Background(), dir, TakeoverOptions{Mode: mode})
				assert.ErrorIs(t, err, ErrBadMode, "%q", mode)
			}
		}
	}
}
