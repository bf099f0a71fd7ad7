package durable

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A replace never fails because a reader has the file open: where Windows
// refuses to rename over an open file (always under Wine 8; on NTFS without
// POSIX rename semantics), Write tries again until the reader closes it.
// Here the reader closes its handle at the first retry.
func TestReplaceWaitsForReader(t *testing.T) {
	dir := testharness.TempDir(t)
	path := filepath.Join(dir, "state")
	require.NoError(t, Write(dir, "state", []byte("old")))
	f, err := openRead(path)
	require.NoError(t, err)
	var once sync.Once
	retried := false
	testReplaceRetried.Store(new(func() { once.Do(func() { retried = true; f.Close() }) }))
	defer testReplaceRetried.Store(nil)

	require.NoError(t, Write(dir, "state", []byte("new")))
	f.Close()
	data, err := ReadFile(path, 16)
	require.NoError(t, err)
	assert.Equal(t, "new", string(data))
	if !retried {
		t.Log("the rename went through with the reader's handle open (POSIX rename semantics)")
	}
}
