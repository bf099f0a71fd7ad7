//go:build linux

package runnerstate

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The runner's process tree (tree.lock, Inherit, orphans) and the
// cross-check of runner.lock seen through another mount: each tried here
// with real processes.

// treeRunner is a tree-runner child and the pids of its three children.
type treeRunner struct {
	*child
	inherited, plain, opener int
}

// startTreeRunner starts a tree-runner on dir; its children are killed when
// the test ends.
func startTreeRunner(t *testing.T, dir, behaviour string) *treeRunner {
	t.Helper()
	t.Setenv(envBehaviour, behaviour)
	c := startChild(t, "tree-runner", dir)
	r := &treeRunner{child: c}
	for _, p := range []struct {
		prefix string
		pid    *int
	}{{"child", &r.inherited}, {"plain", &r.plain}, {"opener", &r.opener}} {
		pid, err := strconv.Atoi(c.Expect(p.prefix + " "))
		require.NoError(t, err)
		*p.pid = pid
		t.Cleanup(func() { syscall.Kill(-pid, syscall.SIGKILL); syscall.Kill(pid, syscall.SIGKILL) })
	}
	c.Expect("ready")
	return r
}

// alive reports whether pid names a live process (not gone, not a zombie:
// an orphan that was killed may wait for a reaper that never comes).
func alive(pid int) bool {
	_, err := liveness.Lookup(pid)
	return err == nil
}

// signalsTo records the signals this process sends, as "<pid> <signal>".
func signalsTo(t *testing.T) func() []string { return signalsSeen(t) }

// Case: a runner that starts a worker through Inherit and is killed with
// kill -9 leaves an orphan that still holds the tree lock. The directory
// stays busy: Acquire refuses and names the orphan, Running says not running,
// Status lists it, Standby keeps waiting, Takeover with NoSignal ends busy
// naming it. Takeover signals the orphan (SIGTERM at once, SIGKILL after
// KillAfter for one that ignores SIGTERM) and is admitted once the tree is
// free. A plain child, and one with the file open but not locked, are never
// signalled nor counted.
func TestTreeOrphansKeepTheDirectoryBusy(t *testing.T) {
	for _, behaviour := range []string{"obey", "stubborn"} {
		t.Run(behaviour, func(t *testing.T) {
			dir := t.TempDir()
			r := startTreeRunner(t, dir, behaviour)
			r.Kill()
			r.Wait()

			_, err := Acquire(dir)
			var be *BusyError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, filepath.Join(dir, LockName), be.Path)
			assert.Equal(t, r.inherited, be.PID, "the orphan is named")
			assert.True(t, be.Verified)
			assert.True(t, be.Orphan)
			assert.ErrorContains(t, err, filepath.Join(dir, treeLockName), "the message names the lock the orphans hold")
			assert.ErrorContains(t, err, "orphans")

			_, running, err := Running(dir)
			require.NoError(t, err)
			assert.False(t, running, "only orphans: not running")
			st, err := Status(dir)
			require.NoError(t, err)
			assert.False(t, st.Held)
			assert.Equal(t, []int{r.inherited}, st.Orphans)
			assert.NotContains(t, st.Stale, r.inherited)
			assert.True(t, containsAny(st.Warnings, "previous runner's tree"), "%q", st.Warnings)

			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, err = Standby(ctx, dir, StandbyOptions{})
			cancel()
			assert.ErrorIs(t, err, ErrBusy, "a standby waits for the last orphan")
			if assert.ErrorAs(t, err, &be) {
				assert.True(t, be.Orphan, "a standby's busy answer says it waited for orphans: %v", err)
			}

			sent := signalsTo(t)
			ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, err = Takeover(ctx, dir, TakeoverOptions{NoSignal: true})
			cancel()
			require.ErrorAs(t, err, &be)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, r.inherited, be.PID)
			assert.Empty(t, sent(), "NoSignal")

			release, err := Takeover(background(t), dir, TakeoverOptions{KillAfter: 200 * time.Millisecond})
			require.NoError(t, err)
			defer release()
			pid := strconv.Itoa(r.inherited)
			want := []string{pid + " terminated"}
			if behaviour == "stubborn" {
				want = append(want, pid+" killed")
			}
			assert.Equal(t, want, sent(), "only the orphan is signalled, once per step")
			assert.False(t, alive(r.inherited))
			assert.True(t, alive(r.plain), "a plain child is left alone")
			assert.True(t, alive(r.opener), "a child with the file open but not locked is left alone")
			st, err = Status(dir)
			require.NoError(t, err)
			assert.True(t, st.Verified)
			assert.Empty(t, st.Orphans)
		})
	}
}

// Case: a runner that releases the directory while its inherited worker
// still runs leaves the worker an orphan, though the runner itself lives on.
// Once the worker exits, the directory is free.
func TestTreeReleaseLeavesWorkersAsOrphans(t *testing.T) {
	dir := t.TempDir()
	r := startTreeRunner(t, dir, "obey")
	r.Send("release")
	r.Expect("released")
	_, err := Acquire(dir)
	var be *BusyError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, r.inherited, be.PID)
	require.NoError(t, syscall.Kill(r.inherited, syscall.SIGKILL))
	eventually(t, "the directory is free once the orphan is gone", func() bool {
		release, err := Acquire(dir)
		if err == nil {
			release()
		}
		return err == nil
	})
	require.NoError(t, r.Stop())
}

func TestInherit(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("true")
	assert.ErrorIs(t, Inherit(dir, cmd), ErrNotHolder)

	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	mine, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer mine.Close()
	cmd.ExtraFiles = []*os.File{mine}
	require.NoError(t, Inherit(dir, cmd))
	require.Len(t, cmd.ExtraFiles, 2, "the caller's entries are kept")
	assert.Same(t, mine, cmd.ExtraFiles[0])

	started := exec.Command("true")
	require.NoError(t, started.Start())
	require.NoError(t, started.Wait())
	err = Inherit(dir, started)
	require.Error(t, err)
	assert.Contains(t, err.Error(), started.Path)
	assert.Empty(t, started.ExtraFiles, "a started cmd is left unchanged")
}

// With fuse.bindfs opted in, a runner (a child process) holds the directory
// through one view; through the other view and through the real path the
// kernel lock looks free, and the cross-check refuses Acquire, Takeover and
// ClearStale, naming the runner, which is left running and never signalled;
// Running and Status there say a runner runs.
func TestFuseViewsCrossCheck(t *testing.T) {
	real, a, b := bindfsViews(t, "bindfs")
	defer TrustFilesystem("fuse.bindfs")()
	cmd := testharness.Command(filepath.Join(a, "d"))
	cmd.Env = append(os.Environ(), fsinfo.TrustEnv+"=fuse.bindfs")
	runner := startChildCmd(t, cmd, "acquire")
	runner.Expect("acquired")
	pid := strconv.Itoa(runner.PID())
	lockBefore, err := os.ReadFile(filepath.Join(real, "d", LockName))
	require.NoError(t, err)
	require.Contains(t, string(lockBefore), `"pid":`+pid)

	for _, dir := range []string{filepath.Join(b, "d"), filepath.Join(real, "d")} {
		t.Run(filepath.Base(filepath.Dir(dir)), func(t *testing.T) {
			logged := captureLog(t)
			refused := func(what string, err error) {
				t.Helper()
				if assert.ErrorIs(t, err, ErrLockingUnsupported, what) {
					assert.Contains(t, err.Error(), "pid "+pid+" (verified alive)", what)
					assert.Contains(t, err.Error(), filepath.Join(a, "d", LockName), what)
					assert.Contains(t, err.Error(), "etcd module", what)
				}
			}
			_, err := Acquire(dir)
			refused("Acquire", err)
			ctx, cancel := context.WithTimeout(context.Background(), childWait)
			defer cancel()
			_, err = Takeover(ctx, dir, TakeoverOptions{Grace: 50 * time.Millisecond, KillAfter: 50 * time.Millisecond})
			refused("Takeover", err)
			_, _, err = ClearStale(dir)
			refused("ClearStale", err)
			assert.Contains(t, logged.String(), "does not exclude")

			sctx, scancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			res, err := Standby(sctx, dir, StandbyOptions{})
			scancel()
			assert.False(t, res.Resumed, "Standby never resumes beside the runner")
			assert.ErrorIs(t, err, context.DeadlineExceeded)

			rec, running, err := Running(dir)
			require.NoError(t, err)
			assert.True(t, running, "Running never says no runner")
			assert.Equal(t, runner.PID(), rec.PID)
			r, err := Status(dir)
			require.NoError(t, err)
			assert.True(t, r.Held, "Status never says no runner")
			assert.Equal(t, runner.PID(), r.Holder.PID)
			assert.Contains(t, strings.Join(r.Warnings, "\n"), "another mount")
			assert.NotEmpty(t, r.Filesystem)
		})
	}
	// The runner was left alone, and its lock file as it was.
	runner.Send("read")
	assert.Empty(t, runner.Expect("read"), "the runner reads its lock file")
	lockAfter, err := os.ReadFile(filepath.Join(real, "d", LockName))
	require.NoError(t, err)
	assert.Equal(t, string(lockBefore), string(lockAfter))
	rec, running, err := Running(filepath.Join(a, "d"))
	require.NoError(t, err)
	assert.True(t, running)
	assert.Equal(t, runner.PID(), rec.PID)
	r, err := Status(filepath.Join(a, "d"))
	require.NoError(t, err)
	assert.True(t, r.Held && r.Verified)
	assert.Empty(t, r.Restart, "no restart request was left for the runner")
	assert.Empty(t, r.Waiting, "the refused starters withdrew from the gate")
	assert.Equal(t, "fuse.bindfs", r.Filesystem)
	assert.NotContains(t, strings.Join(r.Warnings, "\n"), "another mount", "through its own mount the runner holds it plainly")
	runner.CloseStdin()
	require.NoError(t, runner.Wait())

	// Once the runner is gone, the real path admits.
	release, err := Acquire(filepath.Join(real, "d"))
	require.NoError(t, err)
	release()
}

// The cross-check never refuses on a local disk where nobody else holds
// the directory: an identity of a live process whose descriptor serves
// another file (a runner.lock of another directory on this filesystem, or
// something else), and one copied from a live runner's directory to another
// filesystem (cp -a while it ran), are no proof.
func TestCrossCheckNeverRefusesLocal(t *testing.T) {
	other := tempDir(t)
	runner := startChild(t, "acquire", other)
	runner.Expect("acquired")
	content, err := os.ReadFile(filepath.Join(other, LockName))
	require.NoError(t, err)
	require.NotEmpty(t, content)

	copies := []string{tempDir(t)} // the same filesystem
	if shm, err := os.MkdirTemp("/dev/shm", "rs-cross-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		copies = append(copies, shm) // most likely another filesystem
	}
	logged := captureLog(t)
	for _, dir := range copies {
		require.NoError(t, os.WriteFile(filepath.Join(dir, LockName), content, 0o600))
		release, err := Acquire(dir)
		require.NoError(t, err, "a copied identity in %s", dir)
		release()
	}
	// The identity names a live process's descriptor open on something else.
	dir := tempDir(t)
	lc := bytes.Replace(content, []byte(`"fd":`), []byte(`"fd":0,"x":`), 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, LockName), lc, 0o600))
	release, err := Acquire(dir)
	require.NoError(t, err)
	release()
	assert.NotContains(t, logged.String(), "does not exclude")
	runner.CloseStdin()
	require.NoError(t, runner.Wait())
}

func init() { registerRole("tree-runner", roleTreeRunner) }

// tree-runner: Takeover dir and Publish, then start three children and say
// each one's pid: "child <pid>", a sleep that Inherits the tree lock
// (trapping SIGTERM when $RUNNERSTATE_TEST_BEHAVIOUR is "stubborn"), "plain
// <pid>", a sleep started without Inherit, and "opener <pid>", a sleep given
// tree.lock opened on a descriptor of its own (open, but not locked). Then
// "ready". Command "release" releases the directory ("released"); it runs
// until stdin closes. The children are the test's to kill.
func roleTreeRunner(dir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	defer cancel()
	release, err := Takeover(ctx, dir, TakeoverOptions{})
	if err != nil {
		say("error %v", err)
		return 1
	}
	if err := Publish(dir, Record{Specs: []string{"tree"}}); err != nil {
		say("error %v", err)
		return 1
	}
	script := "exec sleep 600"
	if os.Getenv(envBehaviour) == "stubborn" {
		script = "trap '' TERM; exec sleep 600"
	}
	inherited := exec.Command("sh", "-c", script)
	if err := Inherit(dir, inherited); err != nil {
		say("error %v", err)
		return 1
	}
	plain := exec.Command("sleep", "600")
	opened, err := os.Open(filepath.Join(dir, treeLockName))
	if err != nil {
		say("error %v", err)
		return 1
	}
	opener := exec.Command("sleep", "600")
	opener.ExtraFiles = []*os.File{opened}
	for _, c := range []struct {
		name string
		cmd  *exec.Cmd
	}{{"child", inherited}, {"plain", plain}, {"opener", opener}} {
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // outside the test's process group
		if err := c.cmd.Start(); err != nil {
			say("error %v", err)
			return 1
		}
		say("%s %d", c.name, c.cmd.Process.Pid)
	}
	opened.Close()
	say("ready")
	for cmd := range commands() {
		if cmd == "release" {
			release()
			say("released")
		}
	}
	release()
	return 0
}
