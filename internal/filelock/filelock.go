// Package filelock takes and holds kernel file locks: flock(2) on Unix,
// LockFileEx on Windows (through gofrs/flock), and ErrUnsupported at run
// time where the system has neither. It hands a released lock to the
// in-process waiters of a path through one parked goroutine, and judges
// whether a file's filesystem lets its locks exclude. Who holds a lock, as
// the kernel tells it, is internal/locktable's.
//
// A lock belongs to the open file description, not to the process: two
// Files on one path exclude each other inside one process exactly as they
// do across processes, and closing some other descriptor of the same file
// (as os.ReadFile does) never drops the lock (unlike fcntl locks). Every
// File is opened close-on-exec, never through a symlink, never truncated,
// and after locking it is checked to still be the file at its path.
//
// Errors are *fs.PathError naming the path, with ErrWouldBlock, an
// ErrUnsupported, a durable refusal (symlink, directory, not a regular
// file), ErrHardLinked, ErrReplaced or the system's error inside. Nothing
// here logs or knows which files the caller keeps.
package filelock

import (
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
)

// Mode is how a File is locked.
type Mode uint8

const (
	// Exclusive is a write lock, opened read-write so that the holder can
	// write its identity into the file.
	Exclusive Mode = iota
	// Shared is a read lock; it needs only read permission on the file.
	Shared
)

var (
	// ErrWouldBlock is the answer of a try that found the lock held.
	ErrWouldBlock = errors.New("lock is held by another process")
	// ErrUnsupported is the answer of a filesystem (or a system) that
	// refuses file locks: ENOLCK, EOPNOTSUPP, some network and FUSE
	// filesystems. It comes as an *UnsupportedError.
	ErrUnsupported = errors.New("file locking is not supported on this filesystem")
	// ErrHardLinked refuses a lock file that has another name: the
	// identity written into it would land in that other file too.
	ErrHardLinked = errors.New("has another name (a hard link), and writing to it would write there too; remove the other link")
	// ErrReplaced is the answer when the file keeps being replaced or
	// removed under every lock taken on it.
	ErrReplaced = errors.New("the lock file keeps being replaced or removed while it is locked; stop whatever deletes it")
)

// UnsupportedError is a filesystem's refusal of locks, with the system's
// own error (ENOLCK, EOPNOTSUPP, ERROR_NOT_SUPPORTED...).
type UnsupportedError struct{ Err error }

func (e *UnsupportedError) Error() string        { return ErrUnsupported.Error() + " (" + e.Err.Error() + ")" }
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }
func (e *UnsupportedError) Unwrap() error        { return e.Err }

// maxReplaced bounds how often a try locks again when the file it locked
// was replaced or unlinked under it. Each retry means somebody else is
// deleting the lock file; a handful of rounds tells a race from a loop.
const maxReplaced = 16

// TryLock makes one try, without waiting, to lock the file at path in
// mode, creating it with perm when it does not exist. It returns
// ErrWouldBlock (in an *fs.PathError) when the lock is held.
func TryLock(path string, mode Mode, perm fs.FileMode) (*File, error) {
	f, err := tryLock(path, mode, perm)
	if err != nil && f != nil {
		f.Release()
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// tryLock is TryLock, but when the lock is held it also returns the open,
// unlocked File, for a waiter to block on without opening the file again.
func tryLock(path string, mode Mode, perm fs.FileMode) (*File, error) {
	for replaced := 0; ; replaced++ {
		f, err := open(path, mode, perm)
		if err != nil {
			return nil, err
		}
		if err := f.lock(false); err != nil {
			if errors.Is(err, ErrWouldBlock) {
				// Judged before anyone waits on it: a lock that cannot
				// exclude is refused at once, not after a wait.
				if jerr := f.judge(false); jerr != nil {
					f.Release()
					return nil, jerr
				}
				return f, err
			}
			if errors.Is(err, ErrUnsupported) {
				// A filesystem that refuses locks (ENOLCK on NFS) is named
				// when it is one of those whose locks do not exclude.
				if jerr := f.judge(false); jerr != nil {
					err = jerr
				}
			}
			f.Release()
			return nil, err
		}
		same, err := f.AtPath()
		if err != nil {
			f.Release()
			return nil, err
		}
		if same {
			// Judged after AtPath, whose stat named the mount: let go
			// at once when its locks do not exclude, before anything
			// is written.
			if jerr := f.judge(true); jerr != nil {
				f.Release()
				return nil, jerr
			}
			return f, nil
		}
		f.Release()
		if replaced >= maxReplaced {
			return nil, &fs.PathError{Op: "lock", Path: path, Err: ErrReplaced}
		}
	}
}

// refusedMode refuses a locked file that is not a regular file, or that has
// another name: the one check every platform makes after locking.
func refusedMode(path string, mode fs.FileMode, links uint64) error {
	if err := durable.CheckMode(path, mode); err != nil {
		return err
	}
	if links > 1 {
		return &fs.PathError{Op: "refusing", Path: path, Err: ErrHardLinked}
	}
	return nil
}

// refusedFS is the answer of a lock on a filesystem whose locks do not
// exclude (fsinfo.Error): an *UnsupportedError, as for a filesystem that
// refuses locks outright, so that callers treat both alike.
func refusedFS(path string, err error) error {
	return &fs.PathError{Op: "lock", Path: path, Err: &UnsupportedError{Err: err}}
}

// dirOf is the directory of a lock file's path, as the filesystem is
// judged by.
func dirOf(path string) string { return filepath.Dir(path) }

// Judge reports the answer a lock on path would get from the filesystem of
// its directory, without opening or creating anything: nil, or the
// *fs.PathError (with an *UnsupportedError holding an *fsinfo.Error) a
// lock would return. It is for probes that must not answer from a lock
// that cannot exclude.
func Judge(path string) error {
	if err := fsinfo.JudgeDir(dirOf(path)); err != nil {
		return refusedFS(path, err)
	}
	return nil
}

// NotExcluding is the answer of a lock on path found not to exclude by
// proof: holder (a verified live process) holds the same lock through
// another mount, at holderPath as it sees it. typ is the filesystem's type.
func NotExcluding(path, typ string, holder int, holderPath string) error {
	return refusedFS(path, &fsinfo.Error{Dir: dirOf(path), Type: typ, Holder: holder, HolderPath: holderPath})
}
