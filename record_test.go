//go:build unix || windows

package runnerstate

import (
	"encoding/json"
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

// A record without the field, from a build older than v0.3, counts as
// ready only once it carries MaxParallel, Specs or Meta: the placeholder
// such a build writes at admission carries none of them.
func TestStartRecordWithoutReadyCountsAsReadyOnlyWithContent(t *testing.T) {
	for _, c := range []struct {
		json  string
		ready bool
	}{
		{`{"pid":12,"process":{"instance":"x","pid":12},"started_at":"2026-01-02T03:04:05Z"}`, false}, // the placeholder
		{`{"pid":12,"specs":["a"]}`, true},
		{`{"pid":12,"max_parallel":2}`, true},
		{`{"pid":12,"meta":{"job_seconds":2}}`, true},
		{`{"pid":12,"meta":null}`, false},
		{`{"pid":12,"specs":[]}`, false},
		{`{"pid":12,"ready":false,"specs":["a"]}`, false},
		{`{"pid":12,"ready":true}`, true},
	} {
		rec, err := parseRecord([]byte(c.json))
		require.NoError(t, err, c.json)
		assert.Equal(t, c.ready, rec.Ready, c.json)
	}
	data, err := json.Marshal(Record{PID: 1})
	require.NoError(t, err)
	assert.Contains(t, string(data), `"ready":false`)
}

// Case: the note that a failed Publish leaves the hold in place is for a
// process that holds the directory, never for a bad call.
func TestPublishNoteOnlyForAHolder(t *testing.T) {
	for _, dir := range []string{"", tempDir(t)} {
		err := Publish(dir, Record{})
		require.Error(t, err)
		assert.NotContains(t, err.Error(), "still holds", "Publish(%q)", dir)
	}
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
