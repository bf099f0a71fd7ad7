package startup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogTail: the tail starts at the attempt's offset, is at most
// MaxLogTail bytes, begins at a line when it was cut, and is "" for no log.
func TestLogTail(t *testing.T) {
	path := filepath.Join(testharness.TempDir(t), "out.log")
	older := "an older runner's line\n"
	require.NoError(t, os.WriteFile(path, []byte(older+"boom\n"), 0o600))
	assert.Equal(t, "boom\n", LogTail(path, int64(len(older))))
	assert.Empty(t, LogTail(path, 1<<20), "nothing written since the offset")
	assert.Empty(t, LogTail("", 0))
	assert.Empty(t, LogTail(filepath.Join(testharness.TempDir(t), "absent"), 0))

	long := strings.Repeat("0123456789abcdef\n", 2*MaxLogTail/17)
	require.NoError(t, os.WriteFile(path, []byte(long+"last\n"), 0o600))
	tail := LogTail(path, 0)
	assert.LessOrEqual(t, len(tail), MaxLogTail)
	assert.True(t, strings.HasPrefix(tail, "0123456789abcdef\n"), "cut at a line: %q", tail[:20])
	assert.True(t, strings.HasSuffix(tail, "last\n"))
}

// TestAttemptRecord: a record parses back with its failure, and anything
// but one JSON object is an error.
func TestAttemptRecord(t *testing.T) {
	a, err := Parse([]byte(`{"seq":3,"child":{"pid":42},"log":"/d/out.log","failed":true,"exit_code":7,"err":"exit status 7","log_tail":"boom\n"}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), a.Seq)
	assert.False(t, a.Pending(), "a failed attempt is not pending")
	assert.False(t, a.InProgress())
	f := a.Failure()
	assert.Equal(t, Failure{PID: 42, ExitCode: 7, Log: "/d/out.log", LogTail: "boom\n", Err: f.Err}, *f)
	assert.EqualError(t, f.Err, "exit status 7")
	assert.Nil(t, Attempt{Seq: 1}.Failure().Err, "no reason recorded, none made up")
	_, err = Parse([]byte(`[1]`))
	assert.Error(t, err)
	assert.True(t, errors.Is(&Failure{Err: ErrRefused}, ErrRefused))
}
