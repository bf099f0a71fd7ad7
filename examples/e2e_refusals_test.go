//go:build linux

package examples_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The example programs' refusals and exit codes, as a user meets them: a
// directory that cannot be one, a lost lock file, another user's runner, a
// directory this user may not enter.

// runnerOnce runs the runner with args to its end and returns its exit code
// and its standard error.
func (s *story) runnerOnce(args ...string) (int, string) {
	s.t.Helper()
	return s.runToEnd(exec.Command(s.runner, args...))
}

// runToEnd runs cmd, in the story's environment, to its end and returns its
// exit code and combined output; a command that could not run at all fails
// the test.
func (s *story) runToEnd(cmd *exec.Cmd) (int, string) {
	s.t.Helper()
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
	cmd := exec.Command(s.runner, "--help")
	cmd.Env = s.env()
	stdout, err := cmd.Output()
	require.NoError(t, err)
	assert.Contains(t, string(stdout), "72 a lock file was deleted or replaced", "the help asked for is on stdout")
}

// asNobody prepares name (the runner or runnerctl) to run as uid and gid
// 65534 through setpriv, from a copy another user may execute, in a
// directory another user may enter; it returns the command's path and a
// public directory for the test. It skips unless this is root with setpriv.
func (s *story) asNobody(name string) (setpriv, bin, public string) {
	s.t.Helper()
	if os.Getuid() != 0 {
		s.t.Skip("needs root, to run runnerctl as another user through setpriv")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		s.t.Skip("needs setpriv (util-linux), to run runnerctl as another user")
	}
	public = testharness.PublicDir(s.t)
	src := s.runnerctl
	if name == "runner" {
		src = s.runner
	}
	data, err := os.ReadFile(src)
	require.NoError(s.t, err)
	bin = filepath.Join(public, name)
	require.NoError(s.t, os.WriteFile(bin, data, 0o755))
	return setpriv, bin, public
}

// nobody runs bin with args as uid and gid 65534 and returns its exit code
// and combined output.
func (s *story) nobody(setpriv, bin string, args ...string) (int, string) {
	s.t.Helper()
	return s.runToEnd(exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, args...)...))
}

// Case: clear-stale as another user, while root's runner holds the
// directory, exits 75 (a runner holds it), as its help promises, not 1 with
// "permission denied" on runner.lock (0600, root's).
func TestClearStaleAsAnotherUserWhileARunnerHolds(t *testing.T) {
	s := newStory(t)
	setpriv, ctl, public := s.asNobody("runnerctl")
	dir := filepath.Join(public, "d")
	require.NoError(t, os.Mkdir(dir, 0o755)) // a directory the runner creates is 0700, which nobody could not enter
	require.NoError(t, os.Chmod(dir, 0o755))
	r := s.start("r", "--dir", dir, "-job", "1h")
	s.waitLog("r", "job started")
	code, out := s.nobody(setpriv, ctl, "clear-stale", "--dir", dir)
	assert.Equal(t, 75, code, out)
	assert.Regexp(t, `a runner is running \(pid \d+\)|orphans of a previous one`, out)
	require.NoError(t, r.Process.Signal(syscall.SIGTERM))
	s.waitGone("r", r)
	assert.NotContains(t, out, "permission denied")
}

// Case: a user who may not enter the directory (mode 0700, root's) is told
// that the directory is the cause, by runnerctl and by the runner, not to
// fix runner.lock's permissions.
func TestPermissionAdviceNamesTheDirectory(t *testing.T) {
	s := newStory(t)
	setpriv, ctl, public := s.asNobody("runnerctl")
	_, runner, _ := s.asNobody("runner")
	dir := filepath.Join(public, "d")
	require.NoError(t, os.Mkdir(dir, 0o700))
	for _, c := range []struct {
		bin  string
		args []string
	}{
		{ctl, []string{"status", "--dir", dir}},
		{ctl, []string{"clear-stale", "--dir", dir}},
		{ctl, []string{"restart", "--now", "--dir", dir}},
		{runner, []string{"--dir", dir}},
	} {
		code, out := s.nobody(setpriv, c.bin, c.args...)
		assert.NotEqual(t, 0, code, "%v: %s", c.args, out)
		assert.Contains(t, out, "enter "+dir+": permission denied (this process may not enter it: drwx------, owner uid 0", "%v", c.args)
		assert.Contains(t, out, "run as a user allowed to enter it, or fix its permissions", "%v", c.args)
		assert.NotContains(t, out, "runner.lock: permission denied", "%v", c.args)
	}
}

// Case: a user who may enter the directory but not create files in it
// (mode 0755, root's) is told that the directory is why, not only the name
// of the file that could not be made.
func TestPermissionAdviceNamesTheUnwritableDirectory(t *testing.T) {
	s := newStory(t)
	setpriv, runner, public := s.asNobody("runner")
	dir := filepath.Join(public, "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	code, out := s.nobody(setpriv, runner, "--dir", dir)
	assert.NotEqual(t, 0, code, out)
	assert.Contains(t, out, "permission denied (this process may not create files in "+dir+": drwxr-xr-x, owner uid 0", out)
	assert.Contains(t, out, "run as a user allowed to write there, or fix its permissions", out)
}
