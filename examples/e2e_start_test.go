//go:build linux

package examples_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunnerctlStartInterruptedNamesTheRunnerItLeaves: SIGINT ends
// runnerctl start's wait, not the runner it started (detached, in a session
// of its own): it exits 130 and says which process is left running.
func TestRunnerctlStartInterruptedNamesTheRunnerItLeaves(t *testing.T) {
	s := newStory(t)
	dir := filepath.Join(t.TempDir(), "d")
	cmd := exec.Command(s.runnerctl, "start", "--dir", dir, "--", "sleep", "60")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())

	// The attempt is recorded once its process runs: that is the one left.
	var child runnerstate.Identity
	deadline := time.Now().Add(storyWait)
	for child.PID == 0 {
		require.True(t, time.Now().Before(deadline), "start.json never named the process started")
		if data, err := os.ReadFile(filepath.Join(dir, "start.json")); err == nil {
			var a struct{ Child runnerstate.Identity }
			if json.Unmarshal(data, &a) == nil {
				child = a.Child
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	p, v, why := liveness.Pin(liveness.Identity(child))
	require.NotNil(t, p, "%v (%s)", v, why)
	t.Cleanup(func() { p.Signal(liveness.SIGKILL); p.Close() })

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v: %s", err, stderr.String())
	assert.Equal(t, 130, ee.ExitCode(), stderr.String())
	assert.Contains(t, stderr.String(), fmt.Sprintf("the runner started, pid %d, is left running", child.PID))
	v, _ = liveness.Check(liveness.Identity(child))
	assert.Equal(t, liveness.Alive, v, "the runner is left running")
}
