//go:build unix

package filelock

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTryExclusiveWaitsOutALockInTransit: a wait given up leaves its parked
// goroutine blocked; when the holder lets go, that goroutine takes the lock
// and, nobody waiting, releases it at once. A TryExclusive of this process
// that meets the lock then reads it as passing, not as held by this
// process, and takes it once it is let go.
func TestTryExclusiveWaitsOutALockInTransit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	holder, err := TryLock(path, Exclusive, 0o600)
	require.NoError(t, err)

	blocking, got, resume := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer SetGotHook(func(held bool) {
		if !held {
			close(blocking)
			return
		}
		close(got)
		<-resume
	})()
	ctx, cancel := context.WithCancel(context.Background())
	given := make(chan error, 1)
	go func() { _, err := Lock(ctx, path, Exclusive, 0o600); given <- err }()
	<-blocking // the parked goroutine is past its last look at who waits
	cancel()
	require.ErrorIs(t, <-given, ErrWouldBlock, "the wait is given up; its parked goroutine stays")

	read := make(chan BusyAnswer, 1)
	defer SetPassingHook(func(state BusyAnswer) {
		select {
		case read <- state:
		default:
		}
	})()
	holder.Release()
	<-got
	assert.True(t, InTransit(path))

	taken := make(chan error, 1)
	go func() {
		l, err := TryExclusive(path)
		if err == nil {
			l.Release()
		}
		taken <- err
	}()
	assert.Equal(t, BusyPassing, <-read, "this process's own lock on its way to being let go")
	close(resume)
	require.NoError(t, <-taken)
	deadline := time.Now().Add(10 * time.Second)
	for Parked() > 0 {
		require.True(t, time.Now().Before(deadline), "the parked goroutine never ended")
		time.Sleep(time.Millisecond)
	}
}
