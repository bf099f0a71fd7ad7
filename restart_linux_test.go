//go:build linux

package runnerstate

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// WatchRestart's RestartLost (a lock file of the hold deleted or replaced)
// and a dead starter's void request: each tried here with real processes.

// startLostRunner starts a lost-runner on dir.
func startLostRunner(t *testing.T, dir string) *child {
	t.Helper()
	c := startChild(t, "lost-runner", dir)
	c.Expect("acquired")
	return c
}

// A WatchRestart started before Acquire in the process that then holds the
// directory is that hold's watch too: it delivers RestartLost once
// runner.lock is lost.
func TestLostLockFileWatchStartedBeforeAcquire(t *testing.T) {
	dir := t.TempDir()
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), envBehaviour+"=watch-first")
	holder := startChildCmd(t, cmd, "lost-runner")
	holder.Expect("acquired")
	require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
	holder.Expect("got " + RestartLost)
}

// Case: runner.lock removed, or renamed over, under a live holder. The
// holder is told RestartLost at once, by a WatchRestart started before the
// loss and by one started after; its Publish fails saying so. The next
// runner is refused while the holder lives (its tree.lock says it still
// runs), Running and Status name it, and Takeover treats it as a verified
// runner already told: Grace, then SIGTERM.
func TestLostLockFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, dir string)
	}{
		{"removed", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
		}},
		{"renamed over", func(t *testing.T, dir string) {
			other := filepath.Join(dir, "other")
			require.NoError(t, os.WriteFile(other, nil, 0o600))
			require.NoError(t, os.Rename(other, filepath.Join(dir, LockName)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			holder := startLostRunner(t, dir)
			start := time.Now()
			tc.lose(t, dir)
			holder.Expect("got " + RestartLost)
			t.Logf("RestartLost %v after the loss", time.Since(start).Round(time.Microsecond))
			holder.Send("watch")
			holder.Expect("watch2 " + RestartLost)
			holder.Send("publish")
			line := holder.Expect("publish ")
			assert.Contains(t, line, ErrNotHolder.Error())
			assert.Contains(t, line, "removed or replaced while held")
			_, ok := RestartRequested(dir)
			assert.False(t, ok, "RestartLost is never a request")

			_, err := Acquire(dir)
			var be *BusyError
			require.ErrorAs(t, err, &be, "no second runner while the first still runs")
			assert.Equal(t, holder.PID(), be.PID)
			assert.True(t, be.Verified)
			rec, running, err := Running(dir)
			require.NoError(t, err)
			assert.True(t, running)
			assert.Equal(t, holder.PID(), rec.PID)
			st, err := Status(dir)
			require.NoError(t, err)
			assert.True(t, st.Held)
			assert.True(t, st.Verified)
			assert.True(t, containsAny(st.Warnings, "was lost"), "%q", st.Warnings)

			sent := signalsSeen(t)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, err = Takeover(ctx, dir, TakeoverOptions{NoSignal: true})
			cancel()
			require.ErrorAs(t, err, &be)
			assert.Equal(t, holder.PID(), be.PID)
			assert.Empty(t, sent())
			release, err := Takeover(background(t), dir, TakeoverOptions{Grace: 100 * time.Millisecond, KillAfter: 5 * time.Second})
			require.NoError(t, err)
			assert.Equal(t, []string{strconv.Itoa(holder.PID()) + " terminated"}, sent())
			var ee *exec.ExitError
			require.ErrorAs(t, holder.Wait(), &ee)
			release()
		})
	}
	t.Run("tree.lock removed", func(t *testing.T) {
		dir := t.TempDir()
		holder := startLostRunner(t, dir)
		require.NoError(t, os.Remove(filepath.Join(dir, treeLockName)))
		holder.Expect("got " + RestartLost)
		holder.Send("publish")
		assert.Contains(t, holder.Expect("publish "), treeLockName+" was removed or replaced while held")
		_, err := Acquire(dir)
		var be *BusyError
		require.ErrorAs(t, err, &be, "runner.lock still refuses")
		assert.Equal(t, holder.PID(), be.PID)
		require.NoError(t, holder.Stop())
		release, err := Acquire(dir)
		require.NoError(t, err, "free once the holder let go")
		release()
	})
	t.Run("the whole directory removed", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "runner")
		holder := startLostRunner(t, dir)
		// Told at the first unlink, the runner marks its record leaving
		// under the state lock, which can create .state.lock again before
		// RemoveAll's last rmdir: remove until it stays removed, as an
		// operator's second rm -rf would.
		eventually(t, "the directory is removed", func() bool { return os.RemoveAll(dir) == nil })
		holder.Expect("got " + RestartLost)
		holder.Send("publish")
		assert.Contains(t, holder.Expect("publish "), "is gone")
		require.NoError(t, holder.Stop())
	})
}

// Case: a runner whose runner.lock was removed stops on RestartLost; its
// release removes runner.json, which still names it, so that Status lists
// no stale pid of its own. With both lock files removed, a newer runner
// may be admitted meanwhile: the lost runner's release never removes that
// runner's record.
func TestReleaseAfterLostLockFileRemovesOnlyItsOwnRecord(t *testing.T) {
	t.Run("runner.lock removed", func(t *testing.T) {
		dir := t.TempDir()
		holder := startLostRunner(t, dir)
		require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
		holder.Expect("got " + RestartLost)
		require.NoError(t, holder.Stop())
		_, err := os.Lstat(filepath.Join(dir, RecordName))
		assert.ErrorIs(t, err, os.ErrNotExist, "the lost runner's record is gone with it")
		st, err := Status(dir)
		require.NoError(t, err)
		assert.NotContains(t, st.Stale, holder.PID(), "its own pid is not listed as stale")
	})
	t.Run("both lock files removed, a newer runner admitted", func(t *testing.T) {
		dir := t.TempDir()
		holder := startLostRunner(t, dir)
		require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
		require.NoError(t, os.Remove(filepath.Join(dir, treeLockName)))
		holder.Expect("got " + RestartLost)
		release, err := Acquire(dir) // nothing is left to tell it the lost runner is there
		require.NoError(t, err)
		defer release()
		require.NoError(t, Publish(dir, Record{Specs: []string{"newer"}}))
		require.NoError(t, holder.Stop())
		rec, running, err := Running(dir)
		require.NoError(t, err)
		require.True(t, running)
		assert.Equal(t, []string{"newer"}, rec.Specs, "the newer runner's record stays")
		assert.Equal(t, os.Getpid(), rec.PID)
	})
}

// Case: a lost lock file is logged as a warning, naming the directory.
func TestLostLockFileIsAWarning(t *testing.T) {
	var log testharness.LogBuffer
	SetLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer SetLogger(nil)
	dir := t.TempDir()
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, Publish(dir, Record{}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restarts := WatchRestart(ctx, dir)
	require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
	select {
	case mode := <-restarts:
		require.Equal(t, RestartLost, mode)
	case <-background(t).Done():
		t.Fatal("no RestartLost")
	}
	assert.Contains(t, log.String(), "level=WARN")
	assert.Contains(t, log.String(), "lost its lock file")
	assert.Contains(t, log.String(), "dir="+dir)
	release()
	_, err = os.Lstat(filepath.Join(dir, RecordName))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// Case: a starter killed before the runner reads its request leaves the
// request behind. Its starter provably dead, the request is void:
// RestartRequested and Status say none, an operator's request is written
// over it whatever its mode, and a WatchRestart that was offering it
// withdraws it at the starter's exit.
func TestDeadStartersRequestIsVoid(t *testing.T) {
	dir := t.TempDir()
	holder := startChild(t, "acquire", dir) // never reads requests
	holder.Expect("acquired")
	var mu sync.Mutex
	var events []string
	hook := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	testHookWatch.Store(&hook)
	defer testHookWatch.Store(nil)
	seen := func(e string, after int) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, x := range events[min(after, len(events)):] {
			if x == e {
				return true
			}
		}
		return false
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(events) }

	starter := startStarter(t, dir, TakeoverOptions{Grace: time.Hour}, childWait)
	eventually(t, "the starter asked", func() bool {
		req, ok := readRestart(dir)
		return ok && req.By.PID == starter.PID()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := WatchRestart(ctx, dir)
	eventually(t, "the request is on offer", func() bool { return seen("offer "+RestartNow, 0) })
	killed := count()
	starter.Kill()
	starter.Wait()
	eventually(t, "the offer is withdrawn once the starter is gone", func() bool { return seen("idle", killed) })

	mode, ok := RestartRequested(dir)
	assert.False(t, ok, "void: %q", mode)
	st, err := Status(dir)
	require.NoError(t, err)
	assert.Empty(t, st.Restart)
	require.NoError(t, RequestRestart(dir, RestartDrain), "an operator's request")
	mode, ok = RestartRequested(dir)
	assert.True(t, ok)
	assert.Equal(t, RestartDrain, mode, "written over the void 'now'")
	assert.Equal(t, RestartDrain, <-watch, "the watch delivers the operator's request, never the void one")
	require.NoError(t, holder.Stop())
}

// Case: an operator's request stands whatever becomes of its writer.
func TestOperatorsRequestOutlivesItsWriter(t *testing.T) {
	dir := t.TempDir()
	holder := startChild(t, "acquire", dir)
	holder.Expect("acquired")
	t.Setenv(envBehaviour, RestartDrain)
	writer := startChild(t, "request", dir)
	writer.Expect("requested")
	require.NoError(t, writer.Wait())
	v, _ := liveness.Check(liveness.Identity(mustRequest(t, dir).By))
	require.Equal(t, liveness.Dead, v, "its writer is gone")
	mode, ok := RestartRequested(dir)
	assert.True(t, ok)
	assert.Equal(t, RestartDrain, mode)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	assert.Equal(t, RestartDrain, <-WatchRestart(ctx, dir))
	require.NoError(t, holder.Stop())
}

func mustRequest(t *testing.T, dir string) restartRequest {
	t.Helper()
	req, ok := readRestart(dir)
	require.True(t, ok)
	return req
}

func init() { registerRole("lost-runner", roleLostRunner) }

// lost-runner: Acquire dir, Publish, watch for restart requests, say
// "acquired". Each delivery is said as "got <mode>". Commands: "publish"
// (says "publish <error or ok>"), "watch" (a second WatchRestart, whose first
// delivery is said as "watch2 <mode>"). It runs until stdin closes.
func roleLostRunner(dir string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var early <-chan string
	if os.Getenv(envBehaviour) == "watch-first" {
		early = WatchRestart(ctx, dir) // before the hold exists
	}
	release, ok := acquirePublished(dir, Record{Specs: []string{"lost"}})
	if !ok {
		return 1
	}
	defer release()
	restarts := WatchRestart(ctx, dir)
	if early != nil {
		restarts = early
	}
	say("acquired")
	cmds := commands()
	var second <-chan string
	for {
		select {
		case mode := <-restarts:
			say("got %s", mode)
		case mode := <-second:
			say("watch2 %s", mode)
			second = nil
		case cmd, ok := <-cmds:
			switch {
			case !ok:
				return 0
			case cmd == "publish":
				say("publish %s", strings.ReplaceAll(errText(Publish(dir, Record{})), "\n", " "))
			case cmd == "watch":
				second = WatchRestart(ctx, dir)
			}
		}
	}
}
