//go:build unix

package durable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openRead is, for the tests, a handle such as ReadFile holds while it
// reads: on Unix any open file, which never stands in the way of a rename
// or a removal. Windows and the other systems have their own in the
// package.
func openRead(path string) (*os.File, error) { return os.Open(path) }

// A directory path that is a dangling symlink is refused as one, not with
// mkdir's "file exists".
func TestEnsureDirDanglingSymlink(t *testing.T) {
	base := t.TempDir()
	link := filepath.Join(base, "dangle")
	if err := os.Symlink(filepath.Join(base, "missing"), link); err != nil {
		t.Fatal(err)
	}
	err := EnsureDir(link, 0o700)
	if !errors.Is(err, ErrDanglingSymlink) || !strings.Contains(err.Error(), link) {
		t.Fatalf("EnsureDir of a dangling symlink: %v", err)
	}
}

// Case: a directory whose path is a loop of symlinks is named as such, not
// taken for a symlink where the file belongs.
func TestOpenErrorNamesASymlinkLoopOnTheWay(t *testing.T) {
	loop := filepath.Join(t.TempDir(), "loop")
	require.NoError(t, os.Symlink(loop, loop))
	path := filepath.Join(loop, "runner.lock")
	err := OpenError(path, unix.ELOOP)
	assert.NotErrorIs(t, err, ErrSymlink)
	assert.ErrorIs(t, err, unix.ELOOP)
	assert.ErrorContains(t, err, loop+": too many levels of symbolic links")

	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink("target", link))
	assert.ErrorIs(t, OpenError(link, unix.ELOOP), ErrSymlink, "a symlink at the file's own place is still refused as one")
}

// Rewrite changes a file in place, through the inode it opened, and creates
// nothing: a missing file stays missing, a symlink and a hard-linked file
// are refused, and update may decline.
func TestRewriteInPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "start.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"a":"a long old value"}`+"\n"), 0o644))
	before, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, Rewrite(path, 1024, func(old []byte) ([]byte, bool) {
		assert.Equal(t, `{"a":"a long old value"}`+"\n", string(old))
		return []byte(`{"a":1}` + "\n"), true
	}))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, `{"a":1}`+"\n", string(data), "the old tail is cut")
	after, err := os.Stat(path)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "the same inode, not a replacement")
	require.NoError(t, Rewrite(path, 1024, func([]byte) ([]byte, bool) { return []byte("x"), false }))
	data, _ = os.ReadFile(path)
	assert.Equal(t, `{"a":1}`+"\n", string(data), "declined: left as it was")

	missing := filepath.Join(dir, "missing.json")
	assert.ErrorIs(t, Rewrite(missing, 1024, func([]byte) ([]byte, bool) { return []byte("x"), true }), os.ErrNotExist)
	_, err = os.Lstat(missing)
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing created")

	require.NoError(t, os.Symlink(path, filepath.Join(dir, "link.json")))
	assert.ErrorIs(t, Rewrite(filepath.Join(dir, "link.json"), 1024, func([]byte) ([]byte, bool) { return nil, true }), ErrSymlink)
	require.NoError(t, os.Link(path, filepath.Join(dir, "hard.json")))
	assert.ErrorIs(t, Rewrite(path, 1024, func([]byte) ([]byte, bool) { return nil, true }), ErrChanged)
	entries, _ := os.ReadDir(dir)
	assert.Len(t, entries, 3, "no temporary file")
}

// ReadTail reads from an offset, or only the last bytes when more was
// written since; past the end it reads nothing; a FIFO is refused, never
// waited on.
func TestReadTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "runner.log")
	require.NoError(t, os.WriteFile(path, []byte("old\nnew line\n"), 0o600))
	data, err := ReadTail(path, 4, 100)
	require.NoError(t, err)
	assert.Equal(t, "new line\n", string(data))
	data, err = ReadTail(path, 0, 5)
	require.NoError(t, err)
	assert.Equal(t, "line\n", string(data))
	data, err = ReadTail(path, 1<<20, 5)
	require.NoError(t, err)
	assert.Empty(t, data)
	_, err = ReadTail(filepath.Join(dir, "absent"), 0, 5)
	assert.ErrorIs(t, err, os.ErrNotExist)
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	_, err = ReadTail(fifo, 0, 5)
	assert.ErrorIs(t, err, ErrNotRegular)

	// Cut at an offset: what was written before it, at most limit bytes.
	data, err = ReadTailBefore(path, 0, 4, 100)
	require.NoError(t, err)
	assert.Equal(t, "old\n", string(data))
	data, err = ReadTailBefore(path, 0, 7, 3)
	require.NoError(t, err)
	assert.Equal(t, "new", string(data), "the last limit bytes before the cut")
	data, err = ReadTailBefore(path, 4, 4, 100)
	require.NoError(t, err)
	assert.Empty(t, data, "nothing between from and to")
	data, err = ReadTailBefore(path, 4, 1<<20, 100)
	require.NoError(t, err)
	assert.Equal(t, "new line\n", string(data), "a cut past the end cuts nothing")
}
