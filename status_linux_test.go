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
)

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
