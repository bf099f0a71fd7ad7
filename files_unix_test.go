//go:build unix

package runnerstate

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// State-file tests that need Unix: the set-aside copies of an unreadable
// file.

// Case: each unreadable runner.json a fresh holder sets aside is kept under
// a name of its own that begins with runner.json.corrupt (the time in it),
// so a second set-aside keeps the first; at most keepCorrupt stay, the
// oldest (a bare runner.json.corrupt, without a time, first) removed.
func TestSetAsideKeepsEachCopy(t *testing.T) {
	dir := tempDir(t)
	captureLog(t)
	record := filepath.Join(dir, RecordName)
	legacy := filepath.Join(dir, RecordName+corruptSuffix)
	require.NoError(t, os.WriteFile(legacy, []byte("legacy"), 0o644))
	corrupt := func(content string) {
		t.Helper()
		require.NoError(t, os.WriteFile(record, []byte(content), 0o644))
		release, err := Acquire(dir)
		require.NoError(t, err)
		release()
	}
	corrupt("{first garbage")
	corrupt("{second garbage")
	copies := setAsideCopies(t, dir, RecordName)
	require.Len(t, copies, 2, "the second set-aside keeps the first")
	for i, want := range []string{"{first garbage", "{second garbage"} {
		data, err := os.ReadFile(copies[i])
		require.NoError(t, err)
		assert.Equal(t, want, string(data))
		assert.Regexp(t, `^runner\.json\.corrupt-\d{8}T\d{6}\.\d{9}Z`, filepath.Base(copies[i]))
	}
	assert.FileExists(t, legacy, "kept while there are fewer than keepCorrupt copies")

	for i := range keepCorrupt {
		corrupt("{garbage " + strconv.Itoa(i))
	}
	copies = setAsideCopies(t, dir, RecordName)
	assert.Len(t, copies, keepCorrupt)
	assert.NoFileExists(t, legacy, "the oldest copy goes first")
	first, err := os.ReadFile(copies[0])
	require.NoError(t, err)
	assert.Equal(t, "{garbage 0", string(first), "the oldest copies are removed")
	last, err := os.ReadFile(copies[len(copies)-1])
	require.NoError(t, err)
	assert.Equal(t, "{garbage "+strconv.Itoa(keepCorrupt-1), string(last))

	assert.ErrorContains(t, SaveLines(dir, filepath.Base(copies[0]), []string{"x"}), "managed by runnerstate", "a set-aside copy is reserved")
	assert.ErrorContains(t, SaveLines(dir, RestartName+corruptSuffix+"-x", []string{"x"}), "managed by runnerstate")
}
