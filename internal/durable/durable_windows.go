package durable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/windows"
)

// SyncDir: Windows cannot fsync a directory; renames are made durable by
// MoveFileEx itself.
func SyncDir(string) error { return nil }

// foldCase: Windows paths are case-insensitive.
func foldCase(path string) string { return strings.ToLower(path) }

// notFound tells a missing directory from one that is not a directory.
// Windows answers ERROR_PATH_NOT_FOUND for both, and Go calls that ENOTDIR,
// so a caller that refuses "not a directory" would refuse a directory that
// simply does not exist yet. Unless path's parent exists and is not a
// directory, err becomes ERROR_FILE_NOT_FOUND, which is fs.ErrNotExist and
// not ENOTDIR, as Unix answers ENOENT.
func notFound(path string, err error) error {
	if !errors.Is(err, windows.ERROR_PATH_NOT_FOUND) {
		return err
	}
	if fi, serr := os.Stat(filepath.Dir(path)); serr == nil && !fi.IsDir() {
		return err
	}
	return windows.ERROR_FILE_NOT_FOUND
}
