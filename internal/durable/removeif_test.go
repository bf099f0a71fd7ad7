package durable

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Case: RemoveIf removes the caller's file, leaves another's, and when the
// file changes between its look and its removal (here: mine says yes, then
// no), puts what it moved aside back under its name; it leaves no
// temporary file.
func TestRemoveIfNeverRemovesAnothers(t *testing.T) {
	dir := testharness.TempDir(t)
	path := filepath.Join(dir, "rec")
	isMine := func(data []byte) bool { return string(data) == "mine" }

	removed, err := RemoveIf(dir, "rec", 64, isMine)
	require.NoError(t, err)
	assert.False(t, removed, "nothing there")

	require.NoError(t, os.WriteFile(path, []byte("other"), 0o644))
	removed, err = RemoveIf(dir, "rec", 64, isMine)
	require.NoError(t, err)
	assert.False(t, removed)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "other", string(data))

	calls := 0
	swapped := func([]byte) bool { calls++; return calls == 1 }
	removed, err = RemoveIf(dir, "rec", 64, swapped)
	require.NoError(t, err)
	assert.False(t, removed, "replaced between the look and the removal")
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "other", string(data), "another's file is put back")

	require.NoError(t, os.WriteFile(path, []byte("mine"), 0o644))
	removed, err = RemoveIf(dir, "rec", 64, isMine)
	require.NoError(t, err)
	assert.True(t, removed)
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, names, "no file and no temporary file left")
}
