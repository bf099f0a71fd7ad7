//go:build unix

package main

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Case: the runner row never says "unverified" and "alive" together: a
// holder that cannot be verified (flock(1) holding runner.lock, no identity
// in it) is "not verified", with the reason among the warnings.
func TestStatusWordsDoNotContradict(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) (util-linux) is not installed")
	}
	dir := t.TempDir()
	holder := exec.Command("flock", filepath.Join(dir, runnerstate.LockName), "sleep", "600")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, holder.Start())
	t.Cleanup(func() { syscall.Kill(-holder.Process.Pid, syscall.SIGKILL); holder.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	var out string
	for {
		var code int
		code, out, _ = ctl("status", "--dir", dir)
		if code == exitOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	assert.Contains(t, out, "not verified (see warnings)")
	assert.NotContains(t, out, "alive")
	assert.Contains(t, out, "warnings")
}
