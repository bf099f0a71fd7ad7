//go:build unix

package durable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	err := EnsureDir(link)
	if !errors.Is(err, ErrDanglingSymlink) || !strings.Contains(err.Error(), link) {
		t.Fatalf("EnsureDir of a dangling symlink: %v", err)
	}
}
