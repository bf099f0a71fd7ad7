package filelock

import (
	"errors"
	"io/fs"
	"os"
)

// Lost reports whether locks, which this process holds on files in dir,
// lost a file: one was deleted, renamed or replaced while held, or dir is
// gone. why names which. Only proof counts: a lock file or directory that
// cannot be checked (its stat fails with EIO, EACCES...) is not lost.
func Lost(dir string, locks ...*File) (lost bool, why string) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return true, dir + " is gone"
	}
	for _, l := range locks {
		if ok, err := l.AtPath(); !ok && err == nil {
			return true, l.Path() + " was removed or replaced while held"
		}
	}
	return false, ""
}

// LetGo frees l, a lock this process holds on a file it wrote its identity
// into. While l is still the file at its path, cleanup first removes what
// names this process beside it (a record, a sidecar), then the identity is
// cleared, so that a successor never finds the lock free while a file still
// names this process. When the file was replaced under l, nothing at the
// path is this holder's, and only the lock is freed. cleanup's error is
// returned; the lock is freed in any case.
func LetGo(l *File, cleanup func() error) error {
	defer l.Release()
	if ok, _ := l.AtPath(); !ok {
		return nil
	}
	err := cleanup()
	l.WriteContent(nil)
	return err
}
