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
