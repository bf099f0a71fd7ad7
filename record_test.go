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

// PublishNotReady writes the holder's record with Ready false (whatever
// rec says), which Running reports and a later Publish makes ready; a
// process that does not hold dir is refused as Publish refuses it.
func TestPublishNotReady(t *testing.T) {
	dir := tempDir(t)
	assert.ErrorIs(t, PublishNotReady(dir, Record{}), ErrNotHolder)
	assert.NoFileExists(t, filepath.Join(dir, RecordName))
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()

	ep := []Endpoint{{Network: "tcp", Address: "127.0.0.1:7070"}}
	require.NoError(t, PublishNotReady(dir, Record{Ready: true, Program: "idxd", Endpoints: ep}))
	rec, held, err := Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.False(t, rec.Ready, "not ready, whatever rec said")
	assert.Equal(t, "idxd", rec.Program)
	assert.Equal(t, ep, rec.Endpoints)
	assert.Equal(t, os.Getpid(), rec.PID)

	require.NoError(t, Publish(dir, Record{Program: "idxd", Endpoints: ep}))
	rec, _, err = Running(dir)
	require.NoError(t, err)
	assert.True(t, rec.Ready, "Publish makes it ready")
}

// TestLines: what encodeLines writes, splitLines reads back; a line with a
// "\n" is named by its index; AppendLine completes a last line first.
func TestLines(t *testing.T) {
	data, bad := encodeLines([]string{"a", "", "# c"})
	assert.Equal(t, -1, bad)
	assert.Equal(t, "a\n\n# c\n", string(data))
	assert.Equal(t, []string{"a", "", "# c"}, splitLines(data))

	data, bad = encodeLines([]string{"a", "b\nc"})
	assert.Nil(t, data)
	assert.Equal(t, 1, bad)

	assert.Equal(t, []string{}, splitLines(nil), "empty, not nil")
	assert.Equal(t, []string{"a", "b"}, splitLines([]byte("a\nb")), "a last line without its newline")

	old := []byte("a\nb")
	assert.Equal(t, "a\nb\nc\n", string(addLine(old, "c")))
	assert.Equal(t, "a\nb", string(old), "unchanged")
	assert.Equal(t, "c\n", string(addLine(nil, "c")))
	assert.Equal(t, "a\nc\n", string(addLine([]byte("a\n"), "c")))
}

// TestRecordUsable: a record is usable when it is its runner's own Publish,
// not leaving, and names its confirmed process; the admission record, a
// leaving runner's, and a bare pid are not.
func TestRecordUsable(t *testing.T) {
	self := Self()
	for _, c := range []struct {
		name string
		rec  Record
		want bool
	}{
		{"published", Record{PID: self.PID, Process: self, Ready: true}, true},
		{"admission record", Record{PID: self.PID, Process: self}, false},
		{"leaving", Record{PID: self.PID, Process: self, Ready: true, Leaving: RestartDrain}, false},
		{"a bare pid", Record{PID: self.PID, Ready: true}, false},
	} {
		assert.Equal(t, c.want, c.rec.Usable(), c.name)
	}
}
