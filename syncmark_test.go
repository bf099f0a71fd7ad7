//go:build unix || windows

package runnerstate

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Case: two syncs in two processes hold the mark together; a reset in a third
// is refused with ErrSyncRunning; once both finish, a reset succeeds.
func TestSyncMarkSharedResetRefused(t *testing.T) {
	root := filepath.Join(tempDir(t), "root") // SyncRunning creates it
	lockPath := filepath.Join(root, syncLockName)
	s1 := startChild(t, "sync", root)
	s1.Expect("starting")
	s1.Expect("marked")
	s2 := startChild(t, "sync", root)
	s2.Expect("starting")
	s2.Expect("marked")

	r := startChild(t, "reset", root)
	msg := r.Expect("syncrunning ")
	require.NoError(t, r.Wait())
	assert.Contains(t, msg, lockPath)
	assert.Contains(t, msg, "reset again when it finishes")
	if kernelNamesHolders {
		assert.Contains(t, msg, strconv.Itoa(s1.PID()))
		assert.Contains(t, msg, strconv.Itoa(s2.PID()))
	}

	// The same refusal in this process, with the whole error vocabulary.
	_, err := NoSyncRunning(root)
	assert.ErrorIs(t, err, ErrSyncRunning)
	assert.ErrorIs(t, err, ErrBusy)
	assert.NotErrorIs(t, err, ErrSyncUnknown)
	var be *BusyError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, lockPath, be.Path)
	if kernelNamesHolders {
		assert.Contains(t, []int{s1.PID(), s2.PID()}, be.PID)
	}

	require.NoError(t, s1.Stop())
	r = startChild(t, "reset", root)
	msg = r.Expect("syncrunning ")
	if kernelNamesHolders {
		assert.Contains(t, msg, strconv.Itoa(s2.PID()), "one sync still runs")
	}
	require.NoError(t, r.Wait())
	require.NoError(t, s2.Stop())

	r = startChild(t, "reset", root)
	r.Expect("reset")
	// While a reset holds the mark, another reset is refused too, and told
	// so where the kernel tells a reset from a sync.
	_, err = NoSyncRunning(root)
	assert.ErrorIs(t, err, ErrSyncRunning)
	if kernelNamesHolders {
		assert.ErrorContains(t, err, "another reset holds "+lockPath)
		require.ErrorAs(t, err, &be)
		assert.Equal(t, r.PID(), be.PID)
	}
	require.NoError(t, r.Stop())
}

// Case: a sync started while a reset holds the mark waits, in the kernel,
// and runs once the reset ends; waiting syncs do not hold each other back.
func TestSyncWaitsForReset(t *testing.T) {
	root := tempDir(t)
	lockPath := filepath.Join(root, syncLockName)
	release, err := NoSyncRunning(root)
	require.NoError(t, err)

	s1 := startChild(t, "sync", root)
	s1.Expect("starting")
	s2 := startChild(t, "sync", root)
	s2.Expect("starting")
	awaitBlocked(t, "both syncs block in flock", lockPath, 2)

	// A sync in this process with a deadline gives up, naming the mark.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = SyncRunning(ctx, root)
	cancel()
	assert.ErrorIs(t, err, ErrBusy)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, lockPath)
	select {
	case line := <-s1.Lines:
		t.Fatalf("a sync ran while the reset held the mark: %q", line)
	default:
	}

	release()
	s1.Expect("marked")
	s2.Expect("marked")
	_, err = NoSyncRunning(root)
	assert.ErrorIs(t, err, ErrSyncRunning)
	require.NoError(t, s1.Stop())
	require.NoError(t, s2.Stop())
	eventually(t, "the parked goroutine leaves", func() bool { return filelock.Parked() == 0 })
	release, err = NoSyncRunning(root)
	require.NoError(t, err)
	release()
	release() // idempotent
}

// Syncs in one process share the mark; a reset in this process is refused
// while any of them runs.
func TestSyncMarkInProcess(t *testing.T) {
	root := tempDir(t)
	r1, err := SyncRunning(background(t), root)
	require.NoError(t, err)
	r2, err := SyncRunning(cancelled(), root)
	require.NoError(t, err, "a second sync never waits for the first")
	_, err = NoSyncRunning(root)
	assert.ErrorIs(t, err, ErrSyncRunning)
	r1()
	r1()
	_, err = NoSyncRunning(root)
	assert.ErrorIs(t, err, ErrSyncRunning)
	r2()
	reset, err := NoSyncRunning(root)
	require.NoError(t, err)
	reset()
}

// Case: when the mark cannot be taken at all (sync.lock replaced by a
// directory, and its kin), a sync runs unmarked with exactly one warning and
// a reset is refused with ErrSyncUnknown naming the path and what to do.
func TestSyncMarkCannotBeTaken(t *testing.T) {
	for _, tc := range []struct {
		name   string
		plant  func(t *testing.T, path string) (restore func())
		reason string
	}{
		{"directory", func(t *testing.T, path string) func() {
			require.NoError(t, os.Remove(path))
			require.NoError(t, os.Mkdir(path, 0o755))
			return func() {}
		}, "it is a directory"},
		{"symlink", func(t *testing.T, path string) func() {
			needSymlinks(t)
			require.NoError(t, os.Remove(path))
			require.NoError(t, os.Symlink(filepath.Join(filepath.Dir(path), "elsewhere"), path))
			return func() {}
		}, "it is a symlink"},
		{"fifo", func(t *testing.T, path string) func() {
			if !unixFiles {
				t.Skip("no FIFOs here")
			}
			require.NoError(t, os.Remove(path))
			require.NoError(t, mkfifo(path))
			return func() {}
		}, "it is not a regular file"},
		{"ENOLCK", func(t *testing.T, path string) func() { return injectLockErrorOrSkip(t, syscall.ENOLCK) }, "the filesystem refuses file locks"},
		{"EOPNOTSUPP", func(t *testing.T, path string) func() { return injectLockErrorOrSkip(t, syscall.EOPNOTSUPP) }, "the filesystem refuses file locks"},
		{"unreadable", func(t *testing.T, path string) func() {
			if !unixFiles {
				t.Skip("no file modes to make a file unreadable")
			}
			if os.Getuid() == 0 {
				t.Skip("root reads any file")
			}
			require.NoError(t, os.Chmod(path, 0))
			return func() {}
		}, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tempDir(t)
			path := filepath.Join(root, syncLockName)
			// A working mark first, then replaced by something unlockable.
			r, err := NoSyncRunning(root)
			require.NoError(t, err)
			r()
			restore := tc.plant(t, path)
			defer restore()

			log := captureLog(t)
			release, err := SyncRunning(background(t), root)
			require.NoError(t, err, "the sync runs, unmarked")
			require.NotNil(t, release)
			release()
			release()
			assert.Equal(t, 1, strings.Count(log.String(), "level=WARN"), "exactly one warning:\n%s", log)
			assert.Contains(t, log.String(), "runs unmarked")
			assert.Contains(t, log.String(), path)

			_, err = NoSyncRunning(root)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrSyncUnknown)
			assert.NotErrorIs(t, err, ErrSyncRunning)
			assert.NotErrorIs(t, err, ErrBusy)
			msg := err.Error()
			assert.Contains(t, msg, path)
			assert.Contains(t, msg, tc.reason)
			assert.Contains(t, msg, "stop every process that uses "+root)
			assert.Contains(t, msg, "remove "+path)
			assert.Contains(t, msg, "reset again")
			if strings.HasPrefix(tc.reason, "the filesystem") {
				assert.ErrorIs(t, err, ErrLockingUnsupported)
				assert.Contains(t, msg, "local disk")
			}
		})
	}
}

// The same, with the unlockable mark met by a sync in another process: it
// runs and says so on stderr, and the reset there is refused.
func TestSyncMarkDirectoryAcrossProcesses(t *testing.T) {
	root := tempDir(t)
	path := filepath.Join(root, syncLockName)
	require.NoError(t, os.Mkdir(path, 0o755))
	s := startChild(t, "sync", root)
	s.Expect("starting")
	s.Expect("marked")
	r := startChild(t, "reset", root)
	assert.Contains(t, r.Expect("unknown "), "remove "+path)
	require.NoError(t, r.Wait())
	require.NoError(t, s.Stop())
}

// A root that is not a directory is an error for both sides, not a warning.
func TestSyncMarkBadRoot(t *testing.T) {
	file := filepath.Join(tempDir(t), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	log := captureLog(t)
	_, err := SyncRunning(background(t), file)
	assert.ErrorContains(t, err, file)
	_, err = NoSyncRunning(file)
	assert.ErrorContains(t, err, file)
	assert.NotErrorIs(t, err, ErrSyncUnknown)
	_, err = SyncRunning(background(t), "")
	assert.Error(t, err)
	_, err = NoSyncRunning("")
	assert.Error(t, err)
	assert.NotContains(t, log.String(), "level=WARN")
}
