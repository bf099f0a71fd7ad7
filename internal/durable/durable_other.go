//go:build !unix && !windows

package durable

import (
	"io/fs"
	"os"
)

// SyncDir fsyncs a directory where the system can; where it cannot (an
// error from the sync itself) nothing more can be done, and it is not an
// error.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: Unwrap(err)}
	}
	defer d.Close()
	d.Sync()
	return nil
}

func foldCase(path string) string { return path }

// modeBits: file modes say who may write (see OpenToAll).
const modeBits = true

// openRead opens path for reading.
func openRead(path string) (*os.File, error) { return os.Open(path) }

// notFound is err: only Windows needs to tell a missing directory from one
// that is not a directory.
func notFound(_ string, err error) error { return err }

// replaceFile renames oldPath over newPath.
func replaceFile(oldPath, newPath string) error { return os.Rename(oldPath, newPath) }
