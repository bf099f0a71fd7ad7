//go:build unix

package filelock

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// WriteContent cuts the tail only when there may be one: it remembers the
// length it saw (AtPath, ReadContent) or wrote. Whatever another process
// wrote in between, the content after WriteContent is exactly what was
// written once the file was read (as heal reads it), and after a clear.
func TestWriteContentCutsForeignTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runner.lock")
	require.NoError(t, os.WriteFile(path, []byte("a longer line left by a previous holder\n"), 0o600))
	f, err := TryLock(path, Exclusive, 0o600)
	require.NoError(t, err)
	defer f.Release()
	content := func() string {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return string(b)
	}

	require.NoError(t, f.WriteContent([]byte("mine\n")))
	require.Equal(t, "mine\n", content(), "the previous holder's longer line is cut")

	// Another program appends to the file behind the lock.
	g, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = g.WriteString("foreign tail\n")
	require.NoError(t, err)
	require.NoError(t, g.Close())

	got, err := f.ReadContent(1 << 10)
	require.NoError(t, err)
	require.Equal(t, "mine\nforeign tail\n", string(got))
	require.NoError(t, f.WriteContent([]byte("mine again\n")))
	require.Equal(t, "mine again\n", content(), "a tail written by another program is cut once read")

	require.NoError(t, os.WriteFile(path, []byte("mine again\nand more\n"), 0o600))
	require.NoError(t, f.WriteContent(nil))
	require.Empty(t, content(), "a clear leaves nothing, whatever was written since")
}

// TryLockExisting locks a file that is there, and creates none.
func TestTryLockExisting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "start.lock")
	_, err := TryLockExisting(path, Exclusive)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Lstat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing created")

	l, err := TryLock(path, Exclusive, 0o600)
	require.NoError(t, err)
	_, err = TryLockExisting(path, Exclusive)
	require.ErrorIs(t, err, ErrWouldBlock)
	l.Release()
	l, err = TryLockExisting(path, Exclusive)
	require.NoError(t, err)
	l.Release()
}
