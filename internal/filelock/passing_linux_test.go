package filelock

import (
	"os"
	"os/exec"
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

// TestTryExclusiveTriesAgainAfterBeingDescheduled: a busy answer that
// nobody is seen to hold (here a shared lock the kernel lists for this
// process, which gave its descriptor to a child and closed its own) is
// tried again even when this process was kept off a core for longer than
// passingWait right after its first look, as a loaded machine does: the
// tries are counted, not only the time. (Before, TryExclusive gave up
// without a second try, and an Acquire beside a prober in a container
// failed.)
func TestTryExclusiveTriesAgainAfterBeingDescheduled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	l, err := TryLock(path, Exclusive, 0o600)
	require.NoError(t, err)
	l.Release()
	f, err := os.Open(path)
	require.NoError(t, err)
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_SH))
	child := exec.Command("sleep", "600")
	child.ExtraFiles = []*os.File{f}
	require.NoError(t, child.Start())
	defer func() { child.Process.Kill(); child.Wait() }()
	f.Close()

	read := make(chan BusyAnswer, 1)
	defer SetPassingHook(func(state BusyAnswer) {
		read <- state
		child.Process.Kill() // the holder goes...
		child.Wait()
		time.Sleep(2 * passingWait) // ...and this process is off a core past passingWait
	})()
	got, err := TryExclusive(path)
	require.NoError(t, err, "a lock let go while this process was descheduled is taken at its next try")
	got.Release()
	assert.Equal(t, BusyPassing, <-read)
}
