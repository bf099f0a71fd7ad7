//go:build !linux

package durable

// RenameNoReplace renames oldPath to newPath unless newPath exists, in which
// case it fails with an error satisfying errors.Is(err, fs.ErrExist). Without
// renameat2 it links the new name and removes the old one.
func RenameNoReplace(oldPath, newPath string) error { return renameLink(oldPath, newPath) }
