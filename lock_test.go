//go:build unix || windows

package runnerstate

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/testharness"
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

// Case (a runner that missed the SIGTERM that arrived while it was admitted): a
// lock handed off at the instant the context ends is let go at once, never
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
			defer filelock.SetQueuedHook(func(handedOff func() bool) {
				require.NoError(t, holder.Stop()) // the holder lets go...
				eventually(t, "the lock is handed off", handedOff)
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

// fakeFilesystem makes the filesystem of root, and of every directory below
// it, judged as typ by the statfs hook, whose locks do not exclude (unless
// typ is trusted), until the test ends: the filesystems no server here can
// give (NFS, CIFS, 9p), and the macOS and Windows cases.
func fakeFilesystem(t *testing.T, root, typ string) {
	t.Helper()
	t.Cleanup(fsinfo.SetHook(func(dir string) (fsinfo.Answer, bool) {
		if dir == root || strings.HasPrefix(dir, root+string(filepath.Separator)) {
			return fsinfo.Answer{Type: typ}, true
		}
		return fsinfo.Answer{}, false
	}))
}

// assertRefusedEverywhere checks that every lock the package takes in dir
// (on a filesystem of type typ whose locks do not exclude) is refused with
// ErrLockingUnsupported naming the path, the type and what to do; that the
// probes never say "no runner"; and that nothing was created in dir or left
// held.
func assertRefusedEverywhere(t *testing.T, dir, typ string) {
	t.Helper()
	ctx := background(t)
	refused := func(what string, err error) {
		t.Helper()
		if assert.ErrorIs(t, err, ErrLockingUnsupported, what) {
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, "runnerstate: "), "%s: %s", what, msg)
			assert.Contains(t, msg, dir, what)
			assert.Contains(t, msg, typ, what)
			assert.Contains(t, msg, "local disk", what)
			assert.Contains(t, msg, "etcd module", what)
			assert.Contains(t, msg, "RUNNERSTATE_TRUST_FS="+typ, what)
		}
	}
	_, err := TryLock(filepath.Join(dir, "x.lock"))
	refused("TryLock", err)
	_, err = Lock(ctx, filepath.Join(dir, "x.lock"))
	refused("Lock", err)
	_, err = TryRLock(filepath.Join(dir, "x.lock"))
	refused("TryRLock", err)
	_, err = RLock(ctx, filepath.Join(dir, "x.lock"))
	refused("RLock", err)
	_, err = Acquire(dir)
	refused("Acquire", err)
	_, err = Takeover(ctx, dir, TakeoverOptions{})
	refused("Takeover", err)
	_, _, err = ClearStale(dir)
	refused("ClearStale", err)
	_, err = AcquireScope(ctx, filepath.Join(dir, "scope"), dir)
	refused("AcquireScope", err)
	_, err = NoSyncRunning(dir)
	refused("NoSyncRunning", err)
	assert.ErrorIs(t, err, ErrSyncUnknown, "NoSyncRunning")
	refused("RequestRestart", RequestRestart(dir, RestartDrain))
	refused("AppendLine", AppendLine(dir, "jobs.log", "one"))
	refused("SaveLines", SaveLines(dir, "jobs.log", []string{"one"}))
	refused("MigrateFile", MigrateFile(dir, "old.log", "jobs.log"))
	_, err = Standby(ctx, dir, StandbyOptions{})
	refused("Standby", err)
	_, err = Start(ctx, dir, testharness.Command(dir), StartOptions{})
	refused("Start", err)

	logged := captureLog(t)
	release, err := SyncRunning(ctx, dir)
	require.NoError(t, err, "SyncRunning runs unmarked")
	release()
	assert.Equal(t, 1, strings.Count(logged.String(), "level=WARN"), "SyncRunning warns once: %s", logged)
	assert.Contains(t, logged.String(), typ)

	_, _, err = Running(dir)
	refused("Running", err)
	r, err := Status(dir)
	require.NoError(t, err, "Status reports")
	assert.False(t, r.Held)
	assert.Equal(t, typ, r.Filesystem)
	assert.NotEmpty(t, r.Verdict)
	if assert.NotEmpty(t, r.Warnings) {
		assert.Contains(t, r.Warnings[0], typ)
		assert.Contains(t, r.Warnings[0], "cannot tell")
	}

	// Nothing was created in dir: the filesystem was judged first.
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		assert.True(t, d.IsDir(), "%s was created on a filesystem whose locks do not exclude", path)
		return nil
	}))
}

// On the filesystems no server here can give, every lock is refused by
// default, each named as mountinfo (or macOS, or Windows) names it; a
// trusted type is admitted.
func TestNotExcludingFilesystemsRefused(t *testing.T) {
	for _, typ := range []string{"nfs4", "nfs", "cifs", "smb3", "9p", "fuse.sshfs", "virtiofs", "smbfs", "afpfs", "macfuse", "unc", "remote"} {
		t.Run(typ, func(t *testing.T) {
			dir := filepath.Join(tempDir(t), "d")
			require.NoError(t, os.Mkdir(dir, 0o755))
			fakeFilesystem(t, dir, typ)
			assertRefusedEverywhere(t, dir, typ)

			defer TrustFilesystem(typ)()
			release, err := Acquire(dir)
			require.NoError(t, err, "a trusted type is admitted")
			release()
			unlock, err := TryLock(filepath.Join(dir, "x.lock"))
			require.NoError(t, err)
			unlock()
			r, err := Status(dir)
			require.NoError(t, err)
			assert.Equal(t, typ, r.Filesystem)
		})
	}
}

// TrustFilesystem adds to the list and restores it; a type not listed is
// still refused.
func TestTrustFilesystemRestores(t *testing.T) {
	dir := filepath.Join(tempDir(t), "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	fakeFilesystem(t, dir, "nfs4")
	restore := TrustFilesystem("cifs", "nfs4")
	release, err := Acquire(dir)
	require.NoError(t, err)
	release()
	restore()
	_, err = Acquire(dir)
	assert.ErrorIs(t, err, ErrLockingUnsupported)
	defer TrustFilesystem("fuse.sshfs")()
	_, err = Acquire(dir)
	assert.ErrorIs(t, err, ErrLockingUnsupported, "another type's trust does not count")
}

// RUNNERSTATE_TRUST_FS opts types in, read when the first filesystem is
// judged: in a child, whose environment has it.
func TestTrustFilesystemFromEnvironment(t *testing.T) {
	dir := filepath.Join(tempDir(t), "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	for env, want := range map[string]string{
		"nfs4":                  "acquired",
		" fuse.gocryptfs,nfs4 ": "acquired",
		"nfs":                   "refused",
		"":                      "refused",
	} {
		cmd := testharness.Command(dir)
		cmd.Env = append(os.Environ(), fsinfo.TrustEnv+"="+env)
		c := startChildCmd(t, cmd, "acquire-on-nfs4")
		assert.Equal(t, want, c.Expect(""), "RUNNERSTATE_TRUST_FS=%q", env)
		c.CloseStdin()
		require.NoError(t, c.Wait())
	}
}

func init() {
	registerRole("acquire-on-nfs4", roleAcquireOnNFS)
}

// acquire-on-nfs4: with dir judged nfs4, Acquire it and say "acquired" or
// "refused"; exit when stdin closes.
func roleAcquireOnNFS(dir string) int {
	fsinfo.SetHook(func(d string) (fsinfo.Answer, bool) {
		return fsinfo.Answer{Type: "nfs4"}, d == dir
	})
	release, err := Acquire(dir)
	if err != nil {
		say("refused")
	} else {
		say("acquired")
		defer release()
	}
	for range commands() {
	}
	return 0
}

// A filesystem that refuses locks outright (ENOLCK, as NFS without a lock
// manager answers) is named too when its type is one whose locks do not
// exclude; trusted, the system's answer stands.
func TestRefusedLocksNameTheFilesystem(t *testing.T) {
	dir := tempDir(t)
	path := filepath.Join(dir, "x.lock")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	fakeFilesystem(t, dir, "nfs4")
	defer injectLockErrorOrSkip(t, syscall.ENOLCK)()
	_, err := TryLock(path)
	require.ErrorIs(t, err, ErrLockingUnsupported)
	assert.Contains(t, err.Error(), "nfs4")
	defer TrustFilesystem("nfs4")()
	_, err = TryLock(path)
	require.ErrorIs(t, err, ErrLockingUnsupported)
	assert.ErrorIs(t, err, syscall.ENOLCK)
}

func init() { registerRole("wait", roleWait) }

// wait: block in Lock until it is ours, say "locked", hold until stdin
// closes.
func roleWait(path string) int {
	say("waiting")
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		say("error %v", err)
		return 1
	}
	say("locked")
	return holdUntilClosed(unlock)
}
