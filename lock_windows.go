//go:build windows

package runnerstate

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/gofrs/flock"
	"golang.org/x/sys/windows"
)

// lockFile is one handle carrying a LockFileEx lock, through gofrs/flock.
//
// Windows locks are mandatory byte-range locks: while the lock is held, no
// other handle can read the locked byte, so the lock file carries no identity
// on Windows and the holder is named from runner.json only.
type lockFile struct {
	path     string
	fl       *flock.Flock
	released atomic.Bool
}

func openLockFile(path string, kind lockKind) (*lockFile, error) {
	if kind == kindDir {
		path = filepath.Join(path, stateLockName)
	}
	if err := refuseOdd(path); err != nil {
		return nil, err
	}
	flag := os.O_CREATE | os.O_RDWR
	if kind == kindShared {
		flag = os.O_CREATE | os.O_RDONLY
	}
	return &lockFile{path: path, fl: flock.New(path, flock.SetFlag(flag), flock.SetPermissions(0o644))}, nil
}

// refuseOdd refuses a symlink, a directory or another non-regular file at path.
func refuseOdd(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return symlinkError(path)
	case fi.IsDir():
		return isDirError(path)
	case !fi.Mode().IsRegular():
		return notRegular(path)
	}
	return nil
}

func (l *lockFile) lock(exclusive, block bool) error {
	var ok bool
	var err error
	switch {
	case exclusive && block:
		err, ok = l.fl.Lock(), true
	case exclusive:
		ok, err = l.fl.TryLock()
	case block:
		err, ok = l.fl.RLock(), true
	default:
		ok, err = l.fl.TryRLock()
	}
	if err != nil {
		if errors.Is(err, windows.ERROR_NOT_SUPPORTED) || errors.Is(err, errors.ErrUnsupported) {
			return unsupportedError(l.path, err)
		}
		return pathError("lock", l.path, unwrapPathErr(err))
	}
	if !ok {
		return errWouldBlock
	}
	return nil
}

func (l *lockFile) atPath(kind lockKind) (bool, error) {
	fst, err := l.fl.Stat()
	if err != nil {
		return false, pathError("stat", l.path, unwrapPathErr(err))
	}
	pst, err := os.Lstat(l.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, pathError("stat", l.path, unwrapPathErr(err))
	}
	return os.SameFile(fst, pst), nil
}

func (l *lockFile) release() {
	if l.released.CompareAndSwap(false, true) {
		l.fl.Unlock()
	}
}

// writeContent is a no-op on Windows: the locked byte cannot be written
// through another handle, and gofrs/flock does not lend its own.
func (l *lockFile) writeContent(b []byte) error { return nil }

// readContent reads nothing on Windows; see writeContent.
func (l *lockFile) readContent(max int) ([]byte, error) { return nil, nil }

// readHint reads up to max bytes of a regular file, refusing a symlink.
func readHint(path string, max int) ([]byte, error) {
	if err := refuseOdd(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, pathError("read", path, unwrapPathErr(err))
	}
	if len(data) > max {
		return data[:max], errTooLarge
	}
	return data, nil
}

// probeHeld reports whether someone holds an exclusive lock on path, by trying
// a shared lock and dropping it at once. It creates nothing.
func probeHeld(path string) (bool, error) {
	if _, err := os.Lstat(path); err != nil {
		return false, nil
	}
	if err := refuseOdd(path); err != nil {
		return false, err
	}
	fl := flock.New(path, flock.SetFlag(os.O_RDONLY))
	ok, err := fl.TryRLock()
	if err != nil {
		return false, pathError("lock", path, unwrapPathErr(err))
	}
	if ok {
		fl.Unlock()
		return false, nil
	}
	return true, nil
}

// wouldBlockErrno: Windows has no EWOULDBLOCK answer for locks.
var wouldBlockErrno error
