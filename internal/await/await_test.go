package await

import (
	"context"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCheckedIsAskedWhenDue: the check is asked at once, then not again
// before its interval, and a wait ends when it is due.
func TestCheckedIsAskedWhenDue(t *testing.T) {
	asked := 0
	w := New(testharness.TempDir(t), time.Millisecond, func() bool { asked++; return asked == 2 })
	defer w.Close()
	assert.False(t, w.Checked())
	assert.Equal(t, 1, asked, "asked at once")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !w.Checked() {
		require.NoError(t, w.Wait(ctx))
	}
	assert.Equal(t, 2, asked)

	none := New(testharness.TempDir(t), time.Millisecond, nil)
	defer none.Close()
	assert.False(t, none.Checked(), "no check, never checked")
}

// TestFollowWakesOnTheExit: a wait following a process ends when it exits,
// and Follow of the same pid keeps the watch it has.
func TestFollowWakesOnTheExit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the exit is watched through a pidfd on Linux")
	}
	cmd := exec.Command("cat")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	id, err := liveness.Lookup(cmd.Process.Pid)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := New(testharness.TempDir(t), 0, nil)
	defer w.Close()
	w.Follow(ctx, id)
	owner := w.owner
	require.NotNil(t, owner, "a live process is followed")
	w.Follow(ctx, id)
	assert.Same(t, owner, w.owner, "the same pid keeps its watch")
	stdin.Close()
	require.NoError(t, cmd.Wait())
	select {
	case <-w.exited:
	case <-ctx.Done():
		t.Fatal("the exit of the followed process did not wake the wait")
	}
}
