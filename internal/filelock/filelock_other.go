//go:build !unix && !windows

package filelock

import (
	"errors"
	"io/fs"
	"os"
)

// File is a lock file on a system without file locks (js, wasip1, plan9):
// none can be taken, and every attempt answers ErrUnsupported at run time.
type File struct{ path string }

var errNoLocks = errors.New("this system has no file locks")

func open(path string, _ Mode, _ fs.FileMode) (*File, error) {
	return nil, &fs.PathError{Op: "lock", Path: path, Err: &UnsupportedError{Err: errNoLocks}}
}

// Path is the path the File was opened at.
func (f *File) Path() string { return f.path }

// Fd is 0: nothing is ever open.
func (f *File) Fd() uintptr { return 0 }

func (f *File) lock(bool) error {
	return &fs.PathError{Op: "lock", Path: f.path, Err: &UnsupportedError{Err: errNoLocks}}
}

// AtPath is never reached: no File is ever opened.
func (f *File) AtPath() (bool, error) { return false, nil }

// Release does nothing.
func (f *File) Release() {}

// WriteContent does nothing.
func (f *File) WriteContent([]byte) error { return nil }

// CarriesContent is false: there are no locks here to name a holder of.
const CarriesContent = false

// ReadContent reads nothing.
func (f *File) ReadContent(int) ([]byte, error) { return nil, nil }

// SetFlockFault does nothing here; it returns a no-op restore.
func SetFlockFault(error) (restore func()) { return func() {} }

// WouldBlockErrno: there is no lock to block on.
var WouldBlockErrno error

// ProbeHeld answers ErrUnsupported: nothing can be probed.
func ProbeHeld(path string) (bool, error) {
	return false, &fs.PathError{Op: "lock", Path: path, Err: &UnsupportedError{Err: errNoLocks}}
}

// MakePrivate does nothing here: these files have no mode bits to narrow.
func (f *File) MakePrivate() (fs.FileMode, error) { return 0, nil }

// Dup is not available here: the lock's handle cannot be lent (Windows,
// through gofrs/flock) or there is none.
func (f *File) Dup() (*os.File, error) {
	return nil, &fs.PathError{Op: "dup", Path: f.path, Err: errors.ErrUnsupported}
}
