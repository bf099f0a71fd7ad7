//go:build linux

package examples_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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
