//go:build unix || windows

package runnerstate

import (
	"context"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHolderWaitAsksTheCheckWhenDue: the check is asked at once, then not
// again before its interval, and a wait ends when it is due.
func TestHolderWaitAsksTheCheckWhenDue(t *testing.T) {
	asked := 0
	w := newHolderWait(tempDir(t), time.Millisecond, func() bool { asked++; return asked == 2 })
	defer w.close()
	assert.False(t, w.checked())
	assert.Equal(t, 1, asked, "asked at once")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !w.checked() {
		require.NoError(t, w.wait(ctx))
	}
	assert.Equal(t, 2, asked)

	none := newHolderWait(tempDir(t), time.Millisecond, nil)
	defer none.close()
	assert.False(t, none.checked(), "no check, never checked")
}

// TestHolderWaitWakesOnTheFollowedExit: a wait following a process ends when
// it exits, and follow of the same pid keeps the watch it has.
func TestHolderWaitWakesOnTheFollowedExit(t *testing.T) {
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
	w := newHolderWait(tempDir(t), 0, nil)
	defer w.close()
	w.follow(ctx, id)
	watch := w.holder
	require.NotNil(t, watch, "a live process is followed")
	w.follow(ctx, id)
	assert.Same(t, watch, w.holder, "the same pid keeps its watch")
	stdin.Close()
	require.NoError(t, cmd.Wait())
	select {
	case <-w.exited:
	case <-ctx.Done():
		t.Fatal("the exit of the followed process did not wake the wait")
	}
}
