package durable

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadState: a missing file is Absent without an error; one that parses
// is OK; one too large, or one that does not parse, is Corrupt with an error
// naming the path, and neither counts as unreadable; a directory is Corrupt
// and unreadable.
func TestReadState(t *testing.T) {
	dir := testharness.TempDir(t)
	parse := func(data []byte) (string, error) {
		if string(data) != "good" {
			return "", errors.New("not good")
		}
		return string(data), nil
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}

	v, state, err := ReadState(filepath.Join(dir, "missing"), 8, parse)
	assert.NoError(t, err)
	assert.Equal(t, Absent, state)
	assert.Empty(t, v)

	v, state, err = ReadState(write("good", "good"), 8, parse)
	assert.NoError(t, err)
	assert.Equal(t, OK, state)
	assert.Equal(t, "good", v)

	big := write("big", "good and then some")
	_, state, err = ReadState(big, 8, parse)
	assert.Equal(t, Corrupt, state)
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "read", pe.Op)
	assert.Equal(t, big, pe.Path)
	assert.ErrorIs(t, err, ErrTooLarge)
	assert.False(t, Unreadable(err), "too large is known to be wrong")

	bad := write("bad", "bad")
	_, state, err = ReadState(bad, 8, parse)
	assert.Equal(t, Corrupt, state)
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "parse", pe.Op)
	assert.EqualError(t, err, "parse "+bad+": not good")
	assert.False(t, Unreadable(err), "what does not parse is known to be wrong")

	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	_, state, err = ReadState(sub, 8, parse)
	assert.Equal(t, Corrupt, state)
	assert.ErrorIs(t, err, ErrIsDir)
	assert.True(t, Unreadable(err))
}

// TestParseDecodesNewBytesOnly: a Last decodes the same bytes once, hands
// out copies, and remembers an error with its bytes.
func TestParseDecodesNewBytesOnly(t *testing.T) {
	decoded := 0
	m := NewLast(func(data []byte) ([]byte, error) {
		decoded++
		if len(data) == 0 {
			return nil, errors.New("empty")
		}
		return data, nil
	}, func(b []byte) []byte { return append([]byte(nil), b...) })

	got, err := m.Parse([]byte("one"))
	require.NoError(t, err)
	assert.Equal(t, "one", string(got))
	got[0] = 'X' // the caller's copy
	again, err := m.Parse([]byte("one"))
	require.NoError(t, err)
	assert.Equal(t, "one", string(again), "a copy was handed out, not the memo's own")
	assert.Equal(t, 1, decoded, "the same bytes are decoded once")

	_, err = m.Parse([]byte("two"))
	require.NoError(t, err)
	assert.Equal(t, 2, decoded, "other bytes are decoded afresh")
	_, err = m.Parse([]byte{})
	assert.EqualError(t, err, "empty")
	_, err = m.Parse([]byte{})
	assert.EqualError(t, err, "empty", "an error is remembered with its bytes")
	assert.Equal(t, 3, decoded)
}
