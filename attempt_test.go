package runnerstate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogTail: the tail starts at the attempt's offset, is at most
// maxLogTail bytes, begins at a line when it was cut, and is "" for no log.
func TestLogTail(t *testing.T) {
	path := filepath.Join(testharness.TempDir(t), "out.log")
	older := "an older runner's line\n"
	require.NoError(t, os.WriteFile(path, []byte(older+"boom\n"), 0o600))
	assert.Equal(t, "boom\n", logTail(path, int64(len(older))))
	assert.Empty(t, logTail(path, 1<<20), "nothing written since the offset")
	assert.Empty(t, logTail("", 0))
	assert.Empty(t, logTail(filepath.Join(testharness.TempDir(t), "absent"), 0))

	long := strings.Repeat("0123456789abcdef\n", 2*maxLogTail/17)
	require.NoError(t, os.WriteFile(path, []byte(long+"last\n"), 0o600))
	tail := logTail(path, 0)
	assert.LessOrEqual(t, len(tail), maxLogTail)
	assert.True(t, strings.HasPrefix(tail, "0123456789abcdef\n"), "cut at a line: %q", tail[:20])
	assert.True(t, strings.HasSuffix(tail, "last\n"))
}

// TestAttemptRecord: a record parses back with its failure, and anything
// but one JSON object is an error.
func TestAttemptRecord(t *testing.T) {
	a, err := parseAttempt([]byte(`{"seq":3,"child":{"pid":42},"log":"/d/out.log","failed":true,"exit_code":7,"err":"exit status 7","log_tail":"boom\n"}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), a.Seq)
	assert.False(t, a.pending(), "a failed attempt is not pending")
	assert.False(t, a.inProgress("/d"))
	f := a.failure("/d")
	require.NotNil(t, f.Exit)
	assert.Equal(t, Exit{Process: Identity{PID: 42}, How: "unknown", Log: []string{"boom"}}, *f.Exit, "no how recorded: unknown")
	assert.Equal(t, StartError{Dir: "/d", PID: 42, ExitCode: 7, Log: "/d/out.log", LogTail: "boom\n", Err: f.Err, Exit: f.Exit}, *f)
	assert.EqualError(t, f.Err, "exit status 7")
	assert.Nil(t, startAttempt{Seq: 1}.failure("/d").Err, "no reason recorded, none made up")
	_, err = parseAttempt([]byte(`[1]`))
	assert.Error(t, err)
	assert.True(t, errors.Is(&StartError{Err: errRefused}, errRefused))
}

// TestStartLooksAreBounded: a directory's shared look lives while a Start
// call is on it; the last call to leave drops it, so the table never holds
// more directories than there are calls running. A call that has not
// joined looks by itself, and stores nothing.
func TestStartLooksAreBounded(t *testing.T) {
	dir := testharness.TempDir(t)
	looks := func() int {
		startLooks.Lock()
		defer startLooks.Unlock()
		_, ok := startLooks.m[dir]
		if ok {
			return 1
		}
		return 0
	}
	c := &startCall{dir: dir, abs: dir, unreadable: &unreadableSince{}}
	c.lookAfter(time.Now())
	assert.Zero(t, looks(), "a call that has not joined stores no look")

	leave1, leave2 := joinLooks(dir), joinLooks(dir)
	assert.Equal(t, 1, looks())
	woke := time.Now().Add(-time.Millisecond) // strictly before the look, whatever the clock's resolution (Windows')
	c.lookAfter(woke)
	startLooks.Lock()
	at := startLooks.m[dir].at
	startLooks.Unlock()
	c.lookAfter(woke)
	startLooks.Lock()
	assert.Equal(t, at, startLooks.m[dir].at, "a caller woken before the look shares it")
	startLooks.Unlock()
	leave1()
	assert.Equal(t, 1, looks(), "one call is still on it")
	leave2()
	assert.Zero(t, looks(), "the last call to leave drops it")
}
