//go:build unix || windows

package runnerstate

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Case: the dir "" meant the current directory to Status and an error to
// Acquire. It is the same clear error everywhere; the calls without an error
// answer treat it as an empty directory.
func TestEmptyDirIsAnErrorEverywhere(t *testing.T) {
	calls := map[string]func() error{
		"Acquire":        func() error { _, err := Acquire(""); return err },
		"Running":        func() error { _, _, err := Running(""); return err },
		"ClearStale":     func() error { _, _, err := ClearStale(""); return err },
		"Status":         func() error { _, err := Status(""); return err },
		"Publish":        func() error { return Publish("", Record{}) },
		"SaveLines":      func() error { return SaveLines("", "x", nil) },
		"LoadLines":      func() error { _, err := LoadLines("", "x"); return err },
		"AppendLine":     func() error { return AppendLine("", "x", "y") },
		"MigrateFile":    func() error { return MigrateFile("", "x", "y") },
		"RequestRestart": func() error { return RequestRestart("", RestartNow) },
		"ClearRestart":   func() error { return ClearRestart("") },
		"Takeover":       func() error { _, err := Takeover(background(t), "", TakeoverOptions{}); return err },
		"Standby":        func() error { _, err := Standby(background(t), "", StandbyOptions{}); return err },
	}
	for name, call := range calls {
		err := call()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "the directory name is empty", name)
		assert.True(t, strings.HasPrefix(err.Error(), "runnerstate: "), name)
	}
	assert.Empty(t, StalePIDs(""))
	_, ok := RestartRequested("")
	assert.False(t, ok)
	ctx, cancel := context.WithCancel(context.Background())
	ch := WatchRestart(ctx, "")
	cancel()
	for range ch {
		t.Fatal("WatchRestart of an empty directory name delivered a request")
	}
	st, err := Status("")
	require.Error(t, err)
	assert.NotNil(t, st.Waiting)
	assert.NoFileExists(t, LockName, "nothing was created in the current directory")
}

func TestLockingUnsupported(t *testing.T) {
	// The kernel only says ENOLCK on filesystems we cannot mount here (NFS
	// without lockd, some FUSE): inject it.
	path := filepath.Join(tempDir(t), "x.lock")
	restore := injectLockErrorOrSkip(t, syscall.ENOLCK)
	defer restore()
	_, err := TryLock(path)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrLockingUnsupported)
	assert.ErrorIs(t, err, syscall.ENOLCK)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "move it to a local disk")
	assert.Equal(t, 1, strings.Count(err.Error(), "runnerstate:"), "the package is named once: %v", err)
	var pe *fs.PathError
	assert.ErrorAs(t, err, &pe, "an *fs.PathError naming the path")
	_, err = Lock(background(t), path)
	assert.ErrorIs(t, err, ErrLockingUnsupported)
	_, err = Acquire(tempDir(t))
	assert.ErrorIs(t, err, ErrLockingUnsupported)
}

func TestBusyErrorMessage(t *testing.T) {
	// 4194311 is above the largest pid Linux hands out (2^22), so that no
	// process of another user is named as its holder.
	for _, tc := range []struct {
		err  *BusyError
		want string
	}{
		{&BusyError{Path: "/d/runner.lock"}, "runnerstate: /d/runner.lock is locked by another process"},
		{&BusyError{Path: "/d/runner.lock", PID: 4194311, Verified: true}, "runnerstate: /d/runner.lock is locked by pid 4194311 (verified alive)"},
		{&BusyError{Path: "/s/scope.lock", PID: 4194311, Owner: "/data/a"}, "runnerstate: /s/scope.lock is locked by pid 4194311 (unverified) serving /data/a"},
		{&BusyError{Path: "/d/x", cause: context.DeadlineExceeded}, "runnerstate: /d/x is locked by another process: context deadline exceeded"},
		{&BusyError{Path: "/d/x", PID: os.Getpid(), Verified: true}, "runnerstate: /d/x is locked by this process (pid " + strconv.Itoa(os.Getpid()) + ")"},
		{&BusyError{Path: filepath.Join("d", LockName), PID: 4194311, Verified: true, Orphan: true, orphans: 3},
			"runnerstate: d is held by the orphans of a previous runner's tree: pid 4194311 (verified alive) and 2 more still hold " + filepath.Join("d", treeLockName) + "; Takeover stops them, or wait for them to exit"},
		{&BusyError{Path: filepath.Join("d", LockName), Orphan: true, cause: context.Canceled},
			"runnerstate: d is held by the orphans of a previous runner's tree: another process still holds " + filepath.Join("d", treeLockName) + "; Takeover stops them, or wait for them to exit: context canceled"},
		{&BusyError{Path: filepath.Join("d", LockName), PID: 4194311, Verified: true, lost: true},
			"runnerstate: " + filepath.Join("d", LockName) + " was deleted or replaced while pid 4194311 (verified alive) held it, and that runner still holds " + filepath.Join("d", treeLockName) + ": it is told RestartLost, and Takeover escalates if it does not go"},
	} {
		assert.Equal(t, tc.want, tc.err.Error())
	}
	assert.ErrorIs(t, &BusyError{}, ErrBusy)
	assertWouldBlock(t, &BusyError{})
	assert.NotErrorIs(t, error(&BusyError{}), syscall.EAGAIN+1)
}
