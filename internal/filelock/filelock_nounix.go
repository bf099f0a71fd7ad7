//go:build !unix

package filelock

import (
	"errors"
	"io/fs"
	"os"
)

// What a lock file cannot do off Unix: on Windows the locked byte range
// cannot be read or written through another handle, and gofrs/flock lends
// none of its own; on systems without locks (js, wasip1, plan9) there is no
// lock at all.

// CarriesContent is false: a lock file's content is never written (see
// WriteContent), so it never names its holder.
const CarriesContent = false

// WriteContent does nothing.
func (f *File) WriteContent([]byte) error { return nil }

// ReadContent reads nothing.
func (f *File) ReadContent(int) ([]byte, error) { return nil, nil }

// MakePrivate does nothing: these files have no mode bits to narrow.
func (f *File) MakePrivate() (fs.FileMode, error) { return 0, nil }

// Dup is not available: the lock's handle cannot be lent, or there is none.
func (f *File) Dup() (*os.File, error) {
	return nil, &fs.PathError{Op: "dup", Path: f.path, Err: errors.ErrUnsupported}
}

// SetFlockFault does nothing (there is no flock(2) to fault); it returns a
// no-op restore.
func SetFlockFault(error) (restore func()) { return func() {} }

// WouldBlockErrno is nil: no system call here answers EWOULDBLOCK for a lock.
var WouldBlockErrno error

// Empty is true: a lock file carries no content here.
func (f *File) Empty() bool { return true }

// TryLockExisting is not available here: it returns an *fs.PathError
// wrapping errors.ErrUnsupported and opens nothing (on Windows, an open
// handle would block the removal of the file's directory).
func TryLockExisting(path string, _ Mode) (*File, error) {
	return nil, &fs.PathError{Op: "lock", Path: path, Err: errors.ErrUnsupported}
}
