//go:build unix

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
