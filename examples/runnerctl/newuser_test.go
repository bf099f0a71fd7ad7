package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

// Case: a mistyped --dir says "no such directory" in the text, and keeps
// the LSB code of a stopped runner, 3.
func TestStatusSaysNoSuchDirectory(t *testing.T) {
	dir := filepath.Join(testharness.TempDir(t), "mistyped")
	code, out, _ := ctl("status", "--dir", dir)
	assert.Equal(t, exitNotRunning, code, out)
	assert.Contains(t, out, "no such directory")

	code, out, _ = ctl("status", "--dir", testharness.TempDir(t))
	assert.Equal(t, exitNotRunning, code, out)
	assert.NotContains(t, out, "no such directory", "an empty directory is only not running")
}
