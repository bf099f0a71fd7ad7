//go:build unix || windows

package runnerstate

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStateLockReentryFailsAtOnce: code run under a directory's state lock
// that asks for the lock again (here spelled as another path to the same
// directory) is refused at once with errStateLockReentered, never left to
// wait for itself until stateLockWait ends with ErrBusy. Another goroutine
// of the same process is not refused: it is told busy, as a process would
// be. Afterwards the lock is free and held by nobody.
func TestStateLockReentryFailsAtOnce(t *testing.T) {
	dir := tempDir(t)
	err := updateGate(context.Background(), dir, func(*gateState) error {
		return withStateLock(filepath.Join(dir, "."), func() error {
			t.Error("the re-entered lock was granted")
			return nil
		})
	})
	require.ErrorIs(t, err, errStateLockReentered)
	assert.NotErrorIs(t, err, ErrBusy, "refused, not waited out")
	assert.Contains(t, err.Error(), filepath.Join(dir, stateLockName))

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	other := make(chan error, 1)
	require.NoError(t, withStateLock(dir, func() error {
		go func() { other <- withStateLockCtx(ended, dir, func() error { return nil }) }()
		err := <-other
		assert.ErrorIs(t, err, ErrBusy, "another goroutine gets the busy answer")
		assert.NotErrorIs(t, err, errStateLockReentered)
		return nil
	}))

	key, err := filepath.Abs(filepath.Join(dir, stateLockName))
	require.NoError(t, err)
	assert.False(t, stateLockEntries.Held(key))
	require.NoError(t, withStateLockCtx(ended, dir, func() error { return nil }), "free again")
}

func TestGoroutineID(t *testing.T) {
	here := goroutineID()
	require.NotZero(t, here)
	other := make(chan uint64)
	go func() { other <- goroutineID() }()
	assert.NotEqual(t, here, <-other)
	assert.Equal(t, here, goroutineID(), "stable within a goroutine")
}

// TestReentryGuard: a key is held by the goroutine that entered it, and by no other
// goroutine; leaving ends the entry, and keys are independent.
func TestReentryGuard(t *testing.T) {
	var g reentryGuard
	assert.False(t, g.Held("a"))
	leave := g.Enter("a")
	assert.True(t, g.Held("a"))
	assert.False(t, g.Held("b"))
	seen := make(chan bool)
	go func() { seen <- g.Held("a") }()
	assert.False(t, <-seen, "another goroutine does not hold it")
	leave()
	assert.False(t, g.Held("a"))

	// A second call of a leave does not end a later entry by another goroutine.
	leaveAgain := g.Enter("a")
	leaveAgain()
	entered, left := make(chan struct{}), make(chan struct{})
	go func() {
		l := g.Enter("a")
		defer l()
		close(entered)
		<-left
		seen <- g.Held("a")
	}()
	<-entered
	leaveAgain()
	close(left)
	assert.True(t, <-seen, "the holder still holds it")
}
