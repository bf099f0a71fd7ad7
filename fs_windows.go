//go:build windows

package runnerstate

import (
	"path/filepath"
	"strings"
)

// oNoFollow: Windows has no such open flag; symlinks are refused by an Lstat
// before opening, which leaves a window a local attacker could race.
const oNoFollow = 0

// syncDir: Windows cannot fsync a directory; renames are made durable by
// MoveFileEx itself.
func syncDir(dir string) error { return nil }

// dirKey identifies a directory by its absolute, case-folded path.
type dirKey struct{ path string }

func keyOf(dir string) (dirKey, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return dirKey{}, pathError("abs", dir, err)
	}
	return dirKey{path: strings.ToLower(filepath.Clean(abs))}, nil
}

func renameNoReplace(oldPath, newPath string) error { return renameLink(oldPath, newPath) }

// createPrivate: Windows files have no mode bits to narrow; the lock is
// created by the locker as usual.
func createPrivate(path string) {}
