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
	"time"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTryLockExcludesInProcess(t *testing.T) {
	path := filepath.Join(tempDir(t), "x.lock")
	unlock, err := TryLock(path)
	require.NoError(t, err)
	_, err = TryLock(path)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrBusy)
	assertWouldBlock(t, err)
	var be *BusyError
	require.ErrorAs(t, err, &be)
	if kernelNamesHolders {
		assert.Equal(t, os.Getpid(), be.PID, "the kernel names this process as the holder")
	}
	assert.Contains(t, err.Error(), path)
	_, err = TryRLock(path)
	assert.ErrorIs(t, err, ErrBusy, "a shared lock waits for an exclusive one")

	unlock()
	unlock() // idempotent
	unlock2, err := TryLock(path)
	require.NoError(t, err)
	unlock2()
}

func TestSharedLocksCoexist(t *testing.T) {
	path := filepath.Join(tempDir(t), "x.lock")
	r1, err := TryRLock(path)
	require.NoError(t, err)
	other := startChild(t, "rhold", path)
	other.Expect("locked")
	_, err = TryLock(path)
	assert.ErrorIs(t, err, ErrBusy, "an exclusive lock waits for shared ones")
	r1()
	require.NoError(t, other.Stop())
	w, err := TryLock(path)
	require.NoError(t, err)
	w()
}

func TestLockAcrossProcesses(t *testing.T) {
	path := filepath.Join(tempDir(t), "x.lock")
	holder := startChild(t, "hold", path)
	holder.Expect("locked")

	_, err := TryLock(path)
	var be *BusyError
	require.ErrorAs(t, err, &be)
	if kernelNamesHolders {
		assert.Equal(t, holder.PID(), be.PID)
	}

	// A waiter in this process gets the lock when the holder lets go.
	got := make(chan error, 1)
	go func() {
		unlock, err := Lock(background(t), path)
		if err == nil {
			unlock()
		}
		got <- err
	}()
	require.NoError(t, holder.Stop())
	require.NoError(t, <-got)
}

func TestLockWaiterInOtherProcess(t *testing.T) {
	path := filepath.Join(tempDir(t), "x.lock")
	unlock, err := TryLock(path)
	require.NoError(t, err)
	w := startChild(t, "wait", path)
	w.Expect("waiting")
	unlock()
	w.Expect("locked")
	require.NoError(t, w.Stop())
}

func TestLockDeadline(t *testing.T) {
	path := filepath.Join(tempDir(t), "x.lock")
	holder := startChild(t, "hold", path)
	holder.Expect("locked")

	start := time.Now() // before the deadline is set, so it cannot count from later
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := Lock(ctx, path)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrBusy)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, elapsed, 300*time.Millisecond)
	var be *BusyError
	require.ErrorAs(t, err, &be)
	if kernelNamesHolders {
		assert.Equal(t, holder.PID(), be.PID)
	}
	assert.Contains(t, err.Error(), path)
	t.Logf("Lock with a 300ms deadline returned after %v", elapsed)

	// One parked goroutine may outlive the wait, blocked in flock until the
	// holder releases. It must never recreate the file: remove the path and
	// let the holder go; the parked goroutine wakes on the old inode, finds
	// nobody waiting and leaves. (Windows cannot remove a file others have
	// open: there the holder just lets go.)
	assert.Equal(t, 1, filelock.Parked())
	if removeOpenFiles {
		require.NoError(t, os.Remove(path))
	}
	require.NoError(t, holder.Stop())
	eventually(t, "the parked goroutine leaves", func() bool { return filelock.Parked() == 0 })
	if removeOpenFiles {
		_, err = os.Lstat(path)
		assert.True(t, os.IsNotExist(err), "the lock file was recreated")
	}
}

func TestLockCancelledWaitersLeaveOneParker(t *testing.T) {
	path := filepath.Join(tempDir(t), "x.lock")
	holder := startChild(t, "hold", path)
	holder.Expect("locked")
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := Lock(ctx, path); done <- err }()
		eventually(t, "the waiter queues", func() bool { return filelock.Parked() == 1 })
		cancel()
		err := <-done
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, ErrBusy)
	}
	assert.Equal(t, 1, filelock.Parked(), "one parked goroutine per path and mode")
	require.NoError(t, holder.Stop())
	eventually(t, "the parked goroutine leaves", func() bool { return filelock.Parked() == 0 })
	// The lock is free again: nobody holds it after the parker left.
	u, err := TryLock(path)
	require.NoError(t, err)
	u()
}

func TestLockInProcessQueueIsFIFO(t *testing.T) {
	path := filepath.Join(tempDir(t), "x.lock")
	unlock, err := TryLock(path)
	require.NoError(t, err)
	const n = 5
	order := make(chan int, n)
	for i := range n {
		queued := make(chan struct{})
		go func() {
			ctx := background(t)
			go func() {
				for filelock.Queued(path, filelock.Exclusive) <= i {
					time.Sleep(time.Millisecond)
				}
				close(queued)
			}()
			u, err := Lock(ctx, path)
			if err != nil {
				order <- -1
				return
			}
			order <- i
			u()
		}()
		<-queued
	}
	unlock()
	for i := range n {
		assert.Equal(t, i, <-order)
	}
	eventually(t, "the parked goroutine leaves", func() bool { return filelock.Parked() == 0 })
}

func TestLockRetriesWhenFileReplaced(t *testing.T) {
	if !removeOpenFiles {
		t.Skip("a file another process has open cannot be renamed here")
	}
	dir := tempDir(t)
	path := filepath.Join(dir, "x.lock")
	holder := startChild(t, "hold", path)
	holder.Expect("locked")
	// Replace the file under the holder: a lock on the old inode protects the
	// old file only, so a waiter must lock the new one.
	require.NoError(t, os.Rename(path, filepath.Join(dir, "old.lock")))
	unlock, err := TryLock(path)
	require.NoError(t, err, "the new file at path is free")
	unlock()
	require.NoError(t, holder.Stop())
}

func TestLockRefusesOddPaths(t *testing.T) {
	dir := tempDir(t)
	victim := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("precious"), 0o644))
	sub := filepath.Join(dir, "sub.lock")
	require.NoError(t, os.Mkdir(sub, 0o755))
	type oddPath struct{ name, path, want string }
	cases := []oddPath{{"directory", sub, "directory"}}
	if link := filepath.Join(dir, "link.lock"); symlinksWork() {
		require.NoError(t, os.Symlink(victim, link))
		cases = append(cases, oddPath{"symlink", link, "symlink"})
	}
	if fifo := filepath.Join(dir, "fifo.lock"); unixFiles {
		require.NoError(t, mkfifo(fifo))
		cases = append(cases, oddPath{"fifo", fifo, "not a regular file"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, fn := range []func(string) (func(), error){TryLock, TryRLock} {
				_, err := fn(tc.path)
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.path)
				assert.Contains(t, err.Error(), tc.want)
				assert.NotErrorIs(t, err, ErrBusy)
			}
			_, err := Lock(background(t), tc.path)
			assert.Contains(t, err.Error(), tc.path)
		})
	}
	data, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "precious", string(data))
}

func TestLockPermissionIsNotBusy(t *testing.T) {
	path := filepath.Join(tempDir(t), "x.lock")
	require.NoError(t, os.WriteFile(path, nil, 0o444)) // on Windows: the read-only attribute
	if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
		f.Close()
		// Root on Unix; and Wine as root, which enforces the read-only
		// attribute only through Unix modes (.ci/windows/repro/readonly).
		t.Skip("this user can write a read-only file; the reliability tests cover this with another uid")
	}
	_, err := TryLock(path)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrBusy)
	assert.ErrorIs(t, err, os.ErrPermission)
	assert.Contains(t, err.Error(), path)
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
	for _, tc := range []struct {
		err  *BusyError
		want string
	}{
		{&BusyError{Path: "/d/runner.lock"}, "runnerstate: /d/runner.lock is locked by another process"},
		{&BusyError{Path: "/d/runner.lock", PID: 7, Verified: true}, "runnerstate: /d/runner.lock is locked by pid 7 (verified alive)"},
		{&BusyError{Path: "/s/scope.lock", PID: 7, Owner: "/data/a"}, "runnerstate: /s/scope.lock is locked by pid 7 (unverified) serving /data/a"},
		{&BusyError{Path: "/d/x", cause: context.DeadlineExceeded}, "runnerstate: /d/x is locked by another process: context deadline exceeded"},
		{&BusyError{Path: "/d/x", PID: os.Getpid(), Verified: true}, "runnerstate: /d/x is locked by this process (pid " + strconv.Itoa(os.Getpid()) + ")"},
		{&BusyError{Path: filepath.Join("d", LockName), PID: 7, Verified: true, Orphan: true, orphans: 3},
			"runnerstate: d is held by the orphans of a previous runner's tree: pid 7 (verified alive) and 2 more still hold " + filepath.Join("d", treeLockName) + "; Takeover stops them, or wait for them to exit"},
		{&BusyError{Path: filepath.Join("d", LockName), Orphan: true, cause: context.Canceled},
			"runnerstate: d is held by the orphans of a previous runner's tree: another process still holds " + filepath.Join("d", treeLockName) + "; Takeover stops them, or wait for them to exit: context canceled"},
		{&BusyError{Path: filepath.Join("d", LockName), PID: 7, Verified: true, lost: true},
			"runnerstate: " + filepath.Join("d", LockName) + " was deleted or replaced while pid 7 (verified alive) held it, and that runner still holds " + filepath.Join("d", treeLockName) + ": it is told RestartLost, and Takeover escalates if it does not go"},
	} {
		assert.Equal(t, tc.want, tc.err.Error())
	}
	assert.ErrorIs(t, &BusyError{}, ErrBusy)
	assertWouldBlock(t, &BusyError{})
	assert.NotErrorIs(t, error(&BusyError{}), syscall.EAGAIN+1)
}

// Case (a runner that lost the SIGTERM that arrived while it was admitted): a
// lock handed over at the instant the context ends is let go at once, never
// returned. Lock, RLock, AcquireScope and SyncRunning never succeed once
// their context has ended while they waited.
func TestLockNeverSucceedsAfterContextEnds(t *testing.T) {
	cases := []struct {
		name string
		lock string // the lock file in dir
		call func(ctx context.Context, dir string) (func(), error)
	}{
		{"Lock", "x.lock", func(ctx context.Context, dir string) (func(), error) {
			return Lock(ctx, filepath.Join(dir, "x.lock"))
		}},
		{"RLock", "x.lock", func(ctx context.Context, dir string) (func(), error) {
			return RLock(ctx, filepath.Join(dir, "x.lock"))
		}},
		{"AcquireScope", scopeLockName, func(ctx context.Context, dir string) (func(), error) {
			return AcquireScope(ctx, dir, filepath.Join(dir, "data"))
		}},
		{"SyncRunning", syncLockName, func(ctx context.Context, dir string) (func(), error) {
			return SyncRunning(ctx, dir)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tempDir(t)
			path := filepath.Join(dir, tc.lock)
			holder := startChild(t, "hold", path)
			holder.Expect("locked")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			defer filelock.SetQueuedHook(func(handedOver func() bool) {
				require.NoError(t, holder.Stop()) // the holder lets go...
				eventually(t, "the lock is handed over", handedOver)
				cancel() // ...and the context ends before the waiter looks
			})()
			release, err := tc.call(ctx, dir)
			if err == nil {
				release()
				t.Fatalf("%s succeeded although its context ended while it waited", tc.name)
			}
			assert.ErrorIs(t, err, ErrBusy)
			assert.ErrorIs(t, err, context.Canceled)
			assert.Contains(t, err.Error(), path+" was let go as soon as it was taken")
			unlock, err := TryLock(path)
			require.NoError(t, err, "the lock was let go")
			unlock()
			assert.NoFileExists(t, filepath.Join(dir, scopeOwnerName))
		})
	}
}
