//go:build unix && !linux

package runnerstate

// renameNoReplace renames oldPath to newPath unless newPath exists, in which
// case it fails with an error satisfying errors.Is(err, fs.ErrExist).
func renameNoReplace(oldPath, newPath string) error { return renameLink(oldPath, newPath) }
