//go:build linux

package examples_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runnerOnce runs the runner with args to its end and returns its exit code
// and its standard error.
func (s *story) runnerOnce(args ...string) (int, string) {
	s.t.Helper()
	cmd := exec.Command(s.runner, args...)
	cmd.Env = s.env()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(s.t, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// Case: runner --dir afile/sub, where afile is a file: it refuses, naming
// afile, with advice.
func TestRunnerNamesTheParentThatIsAFile(t *testing.T) {
	s := newStory(t)
	afile := filepath.Join(s.tmp, "afile")
	require.NoError(t, os.WriteFile(afile, []byte("x\n"), 0o644))
	code, out := s.runnerOnce("--dir", filepath.Join(afile, "sub"))
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "its parent "+afile+" is not a directory; move "+afile+" away", out)
}

// Case: the runner's start-up hint for a directory whose name holds a
// newline, a quote, a $ and a !, pasted into bash as it is printed, runs
// runnerctl on that very directory.
func TestRunnerHintPastesIntoAShell(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	s := newStory(t)
	dir := filepath.Join(s.tmp, "x\ny'z $HOME!")
	r := s.start("r", "--dir", dir)
	s.waitLog("r", "Stop it with Ctrl-C")
	var line string
	for _, l := range strings.Split(s.log("r"), "\n") {
		if strings.HasPrefix(l, "    go run ./examples/runnerctl status") {
			line = strings.TrimSpace(l)
		}
	}
	require.NotEmpty(t, line, s.log("r"))
	line = strings.Replace(line, "go run ./examples/runnerctl", s.runnerctl, 1)
	cmd := exec.Command(bash, "-c", line)
	cmd.Env = s.env()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "bash -c %s: %s", line, out)
	assert.Contains(t, string(out), "pid "+strconv.Itoa(r.Process.Pid)+", verified alive", "the hint names the runner's own directory:\n%s", out)
}

// Case: runner.lock removed under the runner: it warns, stops at once and
// exits 72, its documented code; its record goes with it, so runnerctl
// status lists no stale pid of its own.
func TestRunnerLostLockFileExits72(t *testing.T) {
	s := newStory(t)
	dir := filepath.Join(s.tmp, "d")
	r := s.start("r", "--dir", dir)
	s.waitLog("r", "job started") // published: its record is there
	require.NoError(t, os.Remove(filepath.Join(dir, "runner.lock")))
	s.waitGone("r", r)
	assert.Equal(t, 72, r.ProcessState.ExitCode(), s.log("r"))
	assert.Regexp(t, `level=WARN msg="lock file lost`, s.log("r"))
	_, err := os.Lstat(filepath.Join(dir, "runner.json"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the lost runner's record is removed")
	out, err := s.ctl("status", "--dir", dir)
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out)
	assert.Equal(t, 3, ee.ExitCode(), out)
	assert.NotContains(t, out, "stale pids", out)

	code, help := s.runnerOnce("--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, help, "72 a lock file was deleted or replaced")
}
