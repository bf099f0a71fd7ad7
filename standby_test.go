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

// TestOwnerWaitAsksTheCheckWhenDue: the check is asked at once, then not
// again before its interval, and a wait ends when it is due.
func TestOwnerWaitAsksTheCheckWhenDue(t *testing.T) {
	asked := 0
	w := newOwnerWait(tempDir(t), time.Millisecond, func() bool { asked++; return asked == 2 })
	defer w.close()
	assert.False(t, w.checked())
	assert.Equal(t, 1, asked, "asked at once")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !w.checked() {
		require.NoError(t, w.wait(ctx))
	}
	assert.Equal(t, 2, asked)

	none := newOwnerWait(tempDir(t), time.Millisecond, nil)
	defer none.close()
	assert.False(t, none.checked(), "no check, never checked")
}

// TestOwnerWaitWakesOnTheFollowedExit: a wait following a process ends when
// it exits, and follow of the same pid keeps the watch it has.
func TestOwnerWaitWakesOnTheFollowedExit(t *testing.T) {
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
	w := newOwnerWait(tempDir(t), 0, nil)
	defer w.close()
	w.follow(ctx, id)
	owner := w.owner
	require.NotNil(t, owner, "a live process is followed")
	w.follow(ctx, id)
	assert.Same(t, owner, w.owner, "the same pid keeps its watch")
	stdin.Close()
	require.NoError(t, cmd.Wait())
	select {
	case <-w.exited:
	case <-ctx.Done():
		t.Fatal("the exit of the followed process did not wake the wait")
	}
}
