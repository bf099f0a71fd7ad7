package durable

import (
	"os"

	"golang.org/x/sys/unix"
)

// RenameNoReplace renames oldPath to newPath unless newPath exists, in which
// case it fails with an error satisfying errors.Is(err, fs.ErrExist).
func RenameNoReplace(oldPath, newPath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldPath, unix.AT_FDCWD, newPath, unix.RENAME_NOREPLACE)
	switch err {
	case nil:
		return nil
	case unix.EINVAL, unix.ENOSYS: // a filesystem or kernel without RENAME_NOREPLACE
		return renameLink(oldPath, newPath)
	}
	return &os.LinkError{Op: "rename", Old: oldPath, New: newPath, Err: err}
}
