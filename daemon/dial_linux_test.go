package daemon

import (
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A server frozen with SIGSTOP would queue a connection and answer
// nothing: Dial says so at once, naming it, rather than hand out a
// connection that hangs.
func TestDialSaysTheServerIsStopped(t *testing.T) {
	dir := shortDir(t)
	s := startServer(t, dir, Options{Endpoints: unixEndpoint("d.sock")})
	s.Expect("ready inherited=0")
	require.NoError(t, syscall.Kill(s.PID(), syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(s.PID(), syscall.SIGCONT) })
	testharness.Eventually(t, "the server is stopped", func() bool {
		c, _, err := Dial(background(t), dir, nil, DialOptions{})
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	_, _, err := Dial(background(t), dir, nil, DialOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is stopped")
	assert.Contains(t, err.Error(), "SIGCONT")
	require.NoError(t, syscall.Kill(s.PID(), syscall.SIGCONT))
	c, _, err := Dial(background(t), dir, nil, DialOptions{})
	require.NoError(t, err, "continued, it is dialled again")
	c.Close()
	require.NoError(t, Stop(background(t), dir, runnerstate.RestartNow))
}
