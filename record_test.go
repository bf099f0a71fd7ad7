//go:build unix || windows

package runnerstate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPublishNeedsTheLock(t *testing.T) {
	dir := tempDir(t)
	err := Publish(dir, Record{})
	assert.ErrorIs(t, err, ErrNotHolder)
	assert.Contains(t, err.Error(), dir)
	// A lock taken with TryLock on the lock file is not a runner's hold.
	unlock, err := TryLock(filepath.Join(dir, LockName))
	require.NoError(t, err)
	defer unlock()
	assert.ErrorIs(t, Publish(dir, Record{}), ErrNotHolder)
	assert.NoFileExists(t, filepath.Join(dir, RecordName))
}

func TestPublishAfterLockFileReplaced(t *testing.T) {
	if !removeOpenFiles {
		t.Skip("a held lock file cannot be removed here")
	}
	dir := tempDir(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
	assert.ErrorIs(t, Publish(dir, Record{}), ErrNotHolder, "a lock on an unlinked file protects nothing")
}
