package main

import (
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
)

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
