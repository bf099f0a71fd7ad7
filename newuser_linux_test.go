//go:build linux

package runnerstate

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer a logger may write from any goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Case: a runner whose runner.lock was removed stops on RestartLost; its
// release removes runner.json, which still names it, so that Status lists
// no stale pid of its own. With both lock files removed, a newer runner
// may be admitted meanwhile: the lost runner's release never removes that
// runner's record.
func TestReleaseAfterLostLockFileRemovesOnlyItsOwnRecord(t *testing.T) {
	t.Run("runner.lock removed", func(t *testing.T) {
		dir := t.TempDir()
		holder := startLostRunner(t, dir)
		require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
		holder.Expect("got " + RestartLost)
		require.NoError(t, holder.Stop())
		_, err := os.Lstat(filepath.Join(dir, RecordName))
		assert.ErrorIs(t, err, os.ErrNotExist, "the lost runner's record is gone with it")
		st, err := Status(dir)
		require.NoError(t, err)
		assert.NotContains(t, st.Stale, holder.PID(), "its own pid is not listed as stale")
	})
	t.Run("both lock files removed, a newer runner admitted", func(t *testing.T) {
		dir := t.TempDir()
		holder := startLostRunner(t, dir)
		require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
		require.NoError(t, os.Remove(filepath.Join(dir, treeLockName)))
		holder.Expect("got " + RestartLost)
		release, err := Acquire(dir) // nothing is left to tell it the lost runner is there
		require.NoError(t, err)
		defer release()
		require.NoError(t, Publish(dir, Record{Specs: []string{"newer"}}))
		require.NoError(t, holder.Stop())
		rec, running, err := Running(dir)
		require.NoError(t, err)
		require.True(t, running)
		assert.Equal(t, []string{"newer"}, rec.Specs, "the newer runner's record stays")
		assert.Equal(t, os.Getpid(), rec.PID)
	})
}

// Case: a lost lock file is logged as a warning, naming the directory.
func TestLostLockFileIsAWarning(t *testing.T) {
	var log lockedBuffer
	SetLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer SetLogger(nil)
	dir := t.TempDir()
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, Publish(dir, Record{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restarts := WatchRestart(ctx, dir)
	require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
	select {
	case mode := <-restarts:
		require.Equal(t, RestartLost, mode)
	case <-background(t).Done():
		t.Fatal("no RestartLost")
	}
	assert.Contains(t, log.String(), "level=WARN")
	assert.Contains(t, log.String(), "lost its lock file")
	assert.Contains(t, log.String(), "dir="+dir)
	release()
	_, err = os.Lstat(filepath.Join(dir, RecordName))
	assert.ErrorIs(t, err, os.ErrNotExist)
}
