package durable

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Migrate renames dir/oldName to dir/newName, for a file that a program
// renames between its versions. It is safe to race: an existing newName
// wins and oldName is removed; a directory at oldName is left where it is
// and Migrate returns nil; an oldName already gone (another process
// migrated it first) is no error. The caller serialises the writers of both
// names that honour it (a lock of its own); a newName that appears under it
// from a writer that does not still wins.
//
// Errors are *fs.PathError naming the path: a symlink at either name is
// refused (ErrSymlink); a *NotDurableError when the file is at its new
// name (or oldName removed, newName winning) but dir could not be synced;
// otherwise the system's error, and both names are as they were.
func Migrate(dir, oldName, newName string) error {
	oldPath, newPath := filepath.Join(dir, oldName), filepath.Join(dir, newName)
	fi, err := os.Lstat(oldPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return &fs.PathError{Op: "stat", Path: oldPath, Err: Unwrap(err)}
	case fi.IsDir():
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		return CheckMode(oldPath, fi.Mode())
	}
	nfi, err := os.Lstat(newPath)
	switch {
	case err == nil && nfi.Mode()&fs.ModeSymlink != 0:
		return CheckMode(newPath, nfi.Mode())
	case err == nil:
		// newName exists: it wins.
		return Remove(dir, oldName)
	case !errors.Is(err, fs.ErrNotExist):
		return &fs.PathError{Op: "stat", Path: newPath, Err: Unwrap(err)}
	}
	if err := RenameNoReplace(oldPath, newPath); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// newName appeared under us (a writer that does not take the
			// caller's lock): it wins.
			return Remove(dir, oldName)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return &fs.PathError{Op: "rename", Path: oldPath, Err: Unwrap(err)}
	}
	return SyncAfter("rename", oldPath, dir)
}
