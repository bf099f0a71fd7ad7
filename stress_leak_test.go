//go:build linux

package runnerstate

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Leak checks. goleak runs after all the package's tests (TestMain); these
// tests trace leaks to the calls that make them: every call that opens a file
// or a pidfd, watches a directory, or starts a goroutine, gives it back by
// the time it returns, its release is called, or its context ends (a parked
// lock waiter: once the holder lets go). The one inotify instance the
// process's directory watches share stays open (see internal/dirwatch).

// openFDs lists this process's open descriptors and what they are.
func openFDs(t *testing.T) map[string]string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	fds := map[string]string{}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		fds[e.Name()] = target
	}
	return fds
}

// leakedFDs is what after holds that before did not.
func leakedFDs(before, after map[string]string) []string {
	var leaked []string
	for fd, target := range after {
		if before[fd] != target {
			leaked = append(leaked, fd+" -> "+target)
		}
	}
	return leaked
}

func TestNoLeaksAcrossTheAPI(t *testing.T) {
	captureLog(t)
	dir := t.TempDir()
	other := t.TempDir()
	// Warm up what is opened once per process (the runtime's poller, the
	// identity, the inotify instance its directory watches share) before
	// taking the baseline.
	Self()
	_, err := Status(dir)
	require.NoError(t, err)
	_, err = Standby(background(t), dir, StandbyOptions{})
	require.NoError(t, err)
	before := openFDs(t)

	for i := range 3 {
		release, err := Acquire(dir)
		require.NoError(t, err)
		require.NoError(t, Publish(dir, Record{Specs: []string{strconv.Itoa(i)}}))
		_, _, err = Running(dir)
		require.NoError(t, err)
		_, err = Status(dir)
		require.NoError(t, err)
		_, err = Acquire(dir)
		require.ErrorIs(t, err, ErrBusy)
		_, _, err = ClearStale(dir)
		require.ErrorIs(t, err, ErrBusy)
		require.NoError(t, RequestRestart(dir, RestartDrain))
		ctx, cancel := context.WithCancel(context.Background())
		restarts := WatchRestart(ctx, dir)
		<-restarts
		cancel()
		for range restarts {
		}
		release()

		release, err = Takeover(background(t), dir, TakeoverOptions{})
		require.NoError(t, err)
		release()
		_, _, err = ClearStale(dir)
		require.NoError(t, err)
		res, err := Standby(background(t), dir, StandbyOptions{})
		require.NoError(t, err)
		require.True(t, res.Resumed)

		require.NoError(t, SaveLines(dir, "state", []string{"a"}))
		require.NoError(t, AppendLine(dir, "log", "b"))
		_, err = LoadLines(dir, "state")
		require.NoError(t, err)
		require.NoError(t, MigrateFile(dir, "state", "state2"))
		require.NoError(t, ClearRestart(dir))

		unlock, err := RLock(background(t), filepath.Join(dir, "x.lock"))
		require.NoError(t, err)
		unlock()

		scopeRelease, err := AcquireScope(background(t), filepath.Join(other, "scope"), dir)
		require.NoError(t, err)
		ReadScopeOwner(filepath.Join(other, "scope"))
		scopeRelease()
		syncRelease, err := SyncRunning(background(t), other)
		require.NoError(t, err)
		_, err = NoSyncRunning(other)
		require.ErrorIs(t, err, ErrBusy)
		syncRelease()
		resetRelease, err := NoSyncRunning(other)
		require.NoError(t, err)
		resetRelease()
	}

	// Against other processes: a takeover of a live runner (a pidfd pins
	// it), a standby that watches a holder exit (a pidfd and a goroutine),
	// and lock waits that end early while another process holds the lock
	// (a parked goroutine that stays until the holder lets go).
	old := startRunner(t, dir, "obey")
	release, err := Takeover(background(t), dir, TakeoverOptions{Grace: time.Minute})
	require.NoError(t, err)
	old.Expect("exiting now")
	require.NoError(t, old.Wait())
	release()

	runner := startChild(t, "acquire", dir)
	runner.Expect("acquired")
	standby := make(chan error, 1)
	go func() {
		_, err := Standby(background(t), dir, StandbyOptions{})
		standby <- err
	}()
	eventually(t, "the standby pins the holder", func() bool {
		return strings.Contains(strings.Join(mapValues(openFDs(t)), " "), "pidfd")
	})
	runner.Kill()
	runner.Wait()
	require.NoError(t, <-standby)

	lockPath := filepath.Join(dir, "waited.lock")
	holder := startChild(t, "hold", lockPath)
	holder.Expect("locked")
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := Lock(ctx, lockPath)
		cancel()
		require.ErrorIs(t, err, ErrBusy)
	}
	require.NoError(t, holder.Stop())
	eventually(t, "the parked waiter leaves once the holder let go", func() bool { return filelock.Parked() == 0 })

	assert.Empty(t, leakedFDs(before, openFDs(t)), "descriptors left open")
	goleak.VerifyNone(t)
}

func mapValues(m map[string]string) []string {
	var v []string
	for _, s := range m {
		v = append(v, s)
	}
	return v
}
