//go:build !unix && !windows

package filelock

import (
	"errors"
	"io/fs"
)

// File is a lock file on a system without file locks (js, wasip1, plan9):
// none can be taken, and every try answers ErrUnsupported at run time.
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

// ProbeHeld answers ErrUnsupported: nothing can be probed.
func ProbeHeld(path string) (bool, error) {
	return false, &fs.PathError{Op: "lock", Path: path, Err: &UnsupportedError{Err: errNoLocks}}
}

// judge does nothing: no lock is ever taken here.
func (f *File) judge(bool) error { return nil }
