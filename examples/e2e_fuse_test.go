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

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Case (two FUSE views of one directory, as a new user meets them): through
// `bindfs real a` and `bindfs real b`, flock through one view is invisible
// through the other, so three example runners, on a/d, b/d and real/d,
// could all be admitted at once. A view is refused by default, naming its
// filesystem; and with its type opted in, the runner through a/d is the
// only one admitted: the others are refused by the cross-check, and
// runnerctl status there names the runner, never "no runner".
func TestExampleRunnersThroughFuseViews(t *testing.T) {
	real, a, b := testharness.BindfsViews(t, "")
	s := newStory(t)
	run := func(name, dir string, env ...string) *exec.Cmd {
		log, err := os.Create(filepath.Join(s.logs, name+".log"))
		require.NoError(t, err)
		cmd := exec.Command(s.runner, "--dir", dir, "--wait", "2s", "--job", "1h")
		cmd.Env = append(s.env(), env...)
		cmd.Stdout, cmd.Stderr = log, log
		require.NoError(t, cmd.Start())
		done := make(chan struct{})
		go func() { cmd.Wait(); log.Close(); close(done) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-done })
		s.exited[cmd] = done
		return cmd
	}
	exitCode := func(cmd *exec.Cmd) int {
		s.waitGone("runner", cmd)
		return cmd.ProcessState.ExitCode()
	}
	status := func(dir string, env ...string) (int, string) {
		cmd := exec.Command(s.runnerctl, "status", "--dir", dir)
		cmd.Env = append(s.env(), env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		require.NoError(t, err)
		return 0, string(out)
	}

	// By default: the views are refused at once, the real path admits.
	for _, v := range []string{a, b} {
		name := "default-" + filepath.Base(v)
		cmd := run(name, filepath.Join(v, "d"))
		assert.Equal(t, 1, exitCode(cmd), "refused through %s", v)
		assert.Contains(t, s.log(name), "not admitted")
		assert.Contains(t, s.log(name), "is on fuse,")
		assert.NotContains(t, s.log(name), "msg=admitted")
		code, out := status(filepath.Join(v, "d"))
		assert.Equal(t, 4, code, "status through a view cannot tell: %s", out)
	}
	entries, _ := os.ReadDir(filepath.Join(real, "d"))
	for _, e := range entries {
		assert.True(t, e.IsDir(), "%s was created through a view", e.Name())
	}

	// Opted in: one runner through a/d; b/d and real/d are refused.
	trust := "RUNNERSTATE_TRUST_FS=fuse"
	first := run("first", filepath.Join(a, "d"), trust)
	s.waitLog("first", "msg=admitted")
	for name, dir := range map[string]string{"second": filepath.Join(b, "d"), "third": filepath.Join(real, "d")} {
		cmd := run(name, dir, trust)
		assert.Equal(t, 1, exitCode(cmd), "%s refused", name)
		assert.Contains(t, s.log(name), "pid "+strconv.Itoa(first.Process.Pid)+" (verified alive)")
		assert.NotContains(t, s.log(name), "msg=admitted")
		assert.NotContains(t, s.log(name), "cleared a stale record")
		code, out := status(dir, trust)
		assert.Equal(t, 0, code, "status there names the runner: %s", out)
		assert.Contains(t, out, "pid "+strconv.Itoa(first.Process.Pid))
		assert.Contains(t, out, "another mount")
	}
	assert.NotContains(t, s.log("first"), "stopping", "the runner was left alone")
	require.NoError(t, first.Process.Signal(os.Interrupt))
	s.waitGone("first", first)
	assert.Equal(t, 1, strings.Count(s.log("first")+s.log("second")+s.log("third"), "msg=admitted"))
}
