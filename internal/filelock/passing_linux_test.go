package filelock

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// sharedLock takes a shared flock on path through a new descriptor opened
// with flags, and returns a func that drops it.
func sharedLock(t *testing.T, path string, flags int) (drop func()) {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB))
	return func() { unix.Close(fd) }
}

// TestTryExclusiveOutwaitsAProbeThatRuns: a probe (ProbeHeld's shared lock)
// whose prober is kept from letting go, as a loaded scheduler keeps it off
// a core between its two flock(2) calls, never makes TryExclusive answer
// busy, however long that lasts: it tries again while the prober runs, well
// past passingWait, and takes the lock once the probe lets go. (Here the
// prober is this process, which runs; under load, a prober in a container
// outlasted passingWait and an Acquire beside it failed.)
func TestTryExclusiveOutwaitsAProbeThatRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	l, err := TryLock(path, Exclusive, 0o600)
	require.NoError(t, err)
	l.Release()
	drop := sharedLock(t, path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW)

	read := make(chan BusyAnswer, 1)
	defer SetPassingHook(func(state BusyAnswer) { read <- state })()
	taken := make(chan error, 1)
	go func() {
		l, err := TryExclusive(path)
		if err == nil {
			l.Release()
		}
		taken <- err
	}()
	assert.Equal(t, BusyProbing, <-read, "only a probe that runs holds it")
	select {
	case err := <-taken:
		drop()
		t.Fatalf("TryExclusive answered %v while the probe was only kept from letting go", err)
	case <-time.After(2 * passingWait):
	}
	drop()
	require.NoError(t, <-taken)
}

// TestTryExclusiveRefusesASharedHolder: a shared lock through a descriptor
// that is not a probe's (flock -s's, say) is a holder's: busy at once.
func TestTryExclusiveRefusesASharedHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	l, err := TryLock(path, Exclusive, 0o600)
	require.NoError(t, err)
	l.Release()
	defer sharedLock(t, path, unix.O_RDONLY)()

	read := make(chan BusyAnswer, 1)
	defer SetPassingHook(func(state BusyAnswer) { read <- state })()
	_, err = TryExclusive(path)
	require.ErrorIs(t, err, ErrWouldBlock)
	assert.Equal(t, BusyHeld, <-read)
}
