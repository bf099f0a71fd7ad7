//go:build linux

package runnerstate

import (
	"os"
	"strconv"
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
