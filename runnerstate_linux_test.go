//go:build linux

package runnerstate

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Runner-protocol tests that need Linux itself: zombies seen through waitid
// and /proc.

// Case: a child runner holds the lock, is killed with SIGKILL and not yet
// reaped. Liveness says Dead; Acquire in another process succeeds at once.
func TestAcquireAfterZombieHolder(t *testing.T) {
	dir := tempDir(t)
	runner := startChild(t, "acquire", dir)
	runner.Expect("acquired")
	rec := readRecordFile(t, dir)
	require.Equal(t, runner.PID(), rec.PID)

	require.NoError(t, runner.Cmd.Process.Signal(syscall.SIGKILL))
	// Wait until the whole thread group has exited, without reaping it
	// (WNOWAIT): then it is a zombie. A multi-threaded process's leader
	// shows state Z in /proc while its other threads are still exiting and
	// its files, the lock among them, still open.
	var info unix.Siginfo
	require.NoError(t, unix.Waitid(unix.P_PID, runner.PID(), &info, unix.WEXITED|unix.WNOWAIT, nil))
	data, err := os.ReadFile("/proc/" + strconv.Itoa(runner.PID()) + "/stat")
	require.NoError(t, err, "not reaped yet")
	st, err := liveness.ParseStat(data)
	require.NoError(t, err)
	require.Equal(t, byte('Z'), st.State)
	v, why := liveness.Check(liveness.Identity(rec.Process))
	assert.Equal(t, liveness.Dead, v, why)

	_, ok, err := Running(dir)
	require.NoError(t, err)
	assert.False(t, ok, "a zombie holds no lock")

	next := startChild(t, "try-acquire", dir)
	next.Expect("acquired")
	require.NoError(t, next.Wait())
	runner.Wait()
}

// A runner frozen with SIGSTOP holds the directory and serves nothing:
// Status still says it is verified alive (it is), and warns that it is
// stopped, naming its pid; continued, the warning goes.
func TestStatusSaysAStoppedHolderIsStopped(t *testing.T) {
	dir := tempDir(t)
	runner := startChild(t, "runner", dir)
	runner.Expect("acquired")
	pid := runner.PID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	eventually(t, "the runner is stopped", func() bool {
		st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		s, err := liveness.ParseStat(st)
		return err == nil && s.State == 'T'
	})
	r, err := Status(dir)
	require.NoError(t, err)
	assert.True(t, r.Verified)
	want := "the runner, pid " + strconv.Itoa(pid) + ", is stopped (state T"
	assert.True(t, hasWarning(r, want), "warnings %q lack %q", r.Warnings, want)

	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	eventually(t, "the warning goes once it is continued", func() bool {
		r, err := Status(dir)
		return err == nil && !hasWarning(r, "is stopped")
	})
}

// hasWarning reports whether one of r's warnings contains s.
func hasWarning(r Report, s string) bool {
	for _, w := range r.Warnings {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}
