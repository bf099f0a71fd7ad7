package liveness

import (
	"context"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExitWatch: the watch reports a real child's exit on both channels,
// names its pid, and a nil watch or one of a process already gone behaves
// as documented.
func TestExitWatch(t *testing.T) {
	var nilWatch *ExitWatch
	assert.Nil(t, nilWatch.Exited())
	assert.Zero(t, nilWatch.PID())
	nilWatch.Stop()

	gone := ExitedAlready()
	assert.Zero(t, gone.PID())
	select {
	case <-gone.Exited():
	default:
		t.Fatal("ExitedAlready's channel is not closed")
	}
	gone.Stop()

	c := startHelper(t, "block")
	p, v, why := Pin(mustLookup(t, c.PID()))
	require.Equal(t, Alive, v, why)
	signal := make(chan struct{}, 1)
	w := WatchExit(context.Background(), p, signal)
	assert.Equal(t, c.PID(), w.PID())
	select {
	case <-w.Exited():
		t.Fatal("exit reported while the process runs")
	default:
	}
	require.NoError(t, p.Signal(syscall.SIGTERM))
	<-w.Exited()
	<-signal
	w.Stop()
	require.Error(t, c.Wait())

	// A stopped watch of a live process reports nothing and closes its pin.
	c = startHelper(t, "block")
	p, v, why = Pin(mustLookup(t, c.PID()))
	require.Equal(t, Alive, v, why)
	w = WatchExit(context.Background(), p, nil)
	w.Stop()
	select {
	case <-w.Exited():
		t.Fatal("a stopped watch reported an exit")
	default:
	}
	assert.ErrorIs(t, p.Signal(syscall.SIGTERM), ErrNotAlive, "Stop closed the pin")
}
