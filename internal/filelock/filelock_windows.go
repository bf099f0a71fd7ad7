package filelock

import (
	"errors"
	"io/fs"
	"os"
	"sync/atomic"

	"github.com/gofrs/flock"
	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"golang.org/x/sys/windows"
)

// File is one handle carrying a LockFileEx lock, through gofrs/flock.
//
// Windows locks are mandatory byte-range locks: while the lock is held, no
// other handle can read the locked byte, so a lock file carries no content
// on Windows (WriteContent and ReadContent do nothing).
type File struct {
	path     string
	fl       *flock.Flock
	mode     Mode
	released atomic.Bool
}

func open(path string, mode Mode, perm fs.FileMode) (*File, error) {
	if err := refuseOdd(path); err != nil {
		return nil, err
	}
	if ferr := fsinfo.JudgeDir(dirOf(path)); ferr != nil {
		return nil, refusedFS(path, ferr)
	}
	flag := os.O_CREATE | os.O_RDWR
	if mode == Shared {
		flag = os.O_CREATE | os.O_RDONLY
	}
	return &File{path: path, mode: mode, fl: flock.New(path, flock.SetFlag(flag), flock.SetPermissions(perm))}, nil
}

// refuseOdd refuses a symlink, a directory or another non-regular file at
// path, by an Lstat before opening.
func refuseOdd(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	return durable.CheckMode(path, fi.Mode())
}

// Path is the path the File was opened at.
func (f *File) Path() string { return f.path }

// Fd is 0: gofrs/flock does not lend its handle.
func (f *File) Fd() uintptr { return 0 }

func (f *File) lock(block bool) error {
	var ok bool
	var err error
	switch {
	case f.mode == Exclusive && block:
		err, ok = f.fl.Lock(), true
	case f.mode == Exclusive:
		ok, err = f.fl.TryLock()
	case block:
		err, ok = f.fl.RLock(), true
	default:
		ok, err = f.fl.TryRLock()
	}
	if err != nil {
		if errors.Is(err, windows.ERROR_NOT_SUPPORTED) || errors.Is(err, errors.ErrUnsupported) {
			return &fs.PathError{Op: "lock", Path: f.path, Err: &UnsupportedError{Err: err}}
		}
		return &fs.PathError{Op: "lock", Path: f.path, Err: durable.Unwrap(err)}
	}
	if !ok {
		return &fs.PathError{Op: "lock", Path: f.path, Err: ErrWouldBlock}
	}
	return nil
}

// AtPath reports whether the locked handle is still the file at its path.
func (f *File) AtPath() (bool, error) {
	fst, err := f.fl.Stat()
	if err != nil {
		return false, &fs.PathError{Op: "stat", Path: f.path, Err: durable.Unwrap(err)}
	}
	if err := refusedMode(f.path, fst.Mode(), 1); err != nil {
		return false, err
	}
	pst, err := os.Lstat(f.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, &fs.PathError{Op: "stat", Path: f.path, Err: durable.Unwrap(err)}
	}
	return os.SameFile(fst, pst), nil
}

// Release drops the lock and closes the handle. It is idempotent.
func (f *File) Release() {
	if f.released.CompareAndSwap(false, true) {
		f.fl.Unlock()
	}
}

// ProbeHeld reports whether someone holds an exclusive lock on path, by
// trying a shared lock and dropping it at once. It creates nothing.
func ProbeHeld(path string) (bool, error) {
	if _, err := os.Lstat(path); err != nil {
		return false, nil
	}
	if err := refuseOdd(path); err != nil {
		return false, err
	}
	fl := flock.New(path, flock.SetFlag(os.O_RDONLY))
	ok, err := fl.TryRLock()
	if err != nil {
		return false, &fs.PathError{Op: "lock", Path: path, Err: durable.Unwrap(err)}
	}
	if ok {
		fl.Unlock()
		return false, nil
	}
	return true, nil
}

// judge does nothing here: the directory was judged when the File was
// made (open), before the lock file could be created.
func (f *File) judge(bool) error { return nil }
