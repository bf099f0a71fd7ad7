//go:build unix

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
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

// Case: --dir afile/sub, where afile is a file: every command says once
// that afile is the problem, and what to do.
func TestParentThatIsAFileIsNamed(t *testing.T) {
	afile := filepath.Join(testharness.TempDir(t), "afile")
	require.NoError(t, os.WriteFile(afile, []byte("x\n"), 0o644))
	dir := filepath.Join(afile, "sub")
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"restart", "--now"}, {"clear-stale"}, {"wait"}} {
		code, _, errOut := ctl(append(args, "--dir", dir)...)
		assert.NotEqual(t, exitOK, code, "%v", args)
		assert.Contains(t, errOut, "its parent "+afile+" is not a directory; move "+afile+" away", "%v", args)
	}
}

// Case: a directory other users can write proves nothing: status says so
// in a warning naming its owner and mode, and exits 4 (cannot tell).
func TestStatusOfADirectoryOthersCanWrite(t *testing.T) {
	dir := testharness.TempDir(t) // directly in the temporary directory: others reach it
	require.NoError(t, os.Chmod(dir, 0o777))
	code, out, _ := ctl("status", "--dir", dir)
	assert.Equal(t, exitUnknown, code, "cannot tell: 4\n%s", out)
	assert.Contains(t, out, "other users can write it")
	assert.Contains(t, out, "0777")
	assert.Contains(t, out, "cannot tell: other users can write this directory")
	assert.NotContains(t, out, "locks do not exclude", "the reason is the directory's modes, not its filesystem")
}

// Case: a runner that ended without releasing, whose end nothing recorded:
// status says it was found gone now, not "found gone at <now> (0s ago)",
// which reads as a time of death.
func TestStatusFoundGoneSaysNoTimeOfDeath(t *testing.T) {
	dir := testharness.TempDir(t)
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	pid := dead.ProcessState.Pid()
	data, err := json.Marshal(runnerstate.Record{PID: pid, Process: runnerstate.Identity{PID: pid}, Program: "srv", Version: "v1.1.0"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, runnerstate.RecordName), data, 0o644))
	code, out, _ := ctl("status", "--dir", dir)
	assert.Equal(t, exitNotRunning, code, out)
	assert.Contains(t, out, "found gone now, when it ended is not known", out)
	assert.NotContains(t, out, "s ago)", out)
}
