package runnerstate

import (
	"errors"
	"io/fs"
	"os"
)

// renameLink renames without replacing by linking the new name (which fails
// when it exists) and removing the old one. Where hard links are not
// supported it falls back to a checked rename, which the state lock makes safe
// among this package's writers.
func renameLink(oldPath, newPath string) error {
	err := os.Link(oldPath, newPath)
	if err == nil {
		return os.Remove(oldPath)
	}
	if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, serr := os.Lstat(newPath); serr == nil {
		return &os.LinkError{Op: "rename", Old: oldPath, New: newPath, Err: fs.ErrExist}
	}
	return os.Rename(oldPath, newPath)
}
