//go:build unix

package filelock

import (
	"errors"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"golang.org/x/sys/unix"
)

// File is one open file description carrying a flock(2) lock.
type File struct {
	path     string
	fd       int
	mode     Mode
	released atomic.Bool
	// size is the file's length as this process last saw or made it, or
	// -1 when unknown; perm its permission bits from AtPath's fstat, or 0.
	// They save WriteContent's ftruncate when nothing is left to cut, and
	// MakePrivate's fstat, on every Acquire.
	size atomic.Int64
	perm atomic.Uint32
	// local says the filesystem's own kind excludes (judge): only there is
	// size never out of date (a network or FUSE mount may not have seen another
	// mount's write yet).
	local atomic.Bool
	//lint:ignore U1000 judge reads it on Linux; elsewhere it is empty and unread
	mountOf // the file's mount, where the system names it (judge)
}

// Flags for opening a lock file: never through a symlink (O_NOFOLLOW), never
// inherited by a child (O_CLOEXEC), never truncated (no O_TRUNC), and never
// blocking on a FIFO planted at the path (O_NONBLOCK, which regular files and
// flock(2) ignore; the non-regular file is refused right after locking).
const (
	openExclusive = unix.O_RDWR | unix.O_CREAT | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK
	openShared    = unix.O_RDONLY | unix.O_CREAT | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK
)

// open opens path for a lock in mode, creating it with perm.
func open(path string, mode Mode, perm fs.FileMode) (*File, error) {
	flags := openExclusive
	if mode == Shared {
		flags = openShared
	}
	// The filesystem is judged before anything is created in it: an open
	// without O_CREAT first, and a file not there yet has its directory
	// judged (one statfs(2)) before it is created. A file that is there is
	// judged once locked, before anything is written (judge).
	fd, err := durable.OpenRetry(path, flags&^unix.O_CREAT, 0)
	if err == unix.ENOENT {
		if ferr := fsinfo.JudgeDir(dirOf(path)); ferr != nil {
			return nil, refusedFS(path, ferr)
		}
		fd, err = durable.OpenRetry(path, flags, uint32(perm.Perm()))
		if err == nil {
			durable.GiveToDirOwner(fd, dirOf(path))
		}
	}
	if err != nil {
		return nil, durable.OpenError(path, err)
	}
	// Whether it is a regular file is checked by AtPath, right after the
	// flock, with the same fstat that compares inodes: one syscall, not two.
	f := &File{path: path, fd: fd, mode: mode}
	f.size.Store(-1)
	return f, nil
}

// Path is the path the File was opened at.
func (f *File) Path() string { return f.path }

// Fd is the descriptor carrying the lock.
func (f *File) Fd() uintptr { return uintptr(f.fd) }

// lock takes the flock in the File's mode. With block false it returns
// ErrWouldBlock at once when another open file description holds a
// conflicting lock.
func (f *File) lock(block bool) error {
	how := unix.LOCK_SH
	if f.mode == Exclusive {
		how = unix.LOCK_EX
	}
	return f.flock(how, block)
}

func (f *File) flock(how int, block bool) error {
	if !block {
		how |= unix.LOCK_NB
	}
	for {
		err := flock(f.fd, how)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EWOULDBLOCK:
			return &fs.PathError{Op: "lock", Path: f.path, Err: ErrWouldBlock}
		case unix.ENOLCK, unix.EOPNOTSUPP, unix.ENOSYS:
			return &fs.PathError{Op: "lock", Path: f.path, Err: &UnsupportedError{Err: err}}
		}
		return &fs.PathError{Op: "flock", Path: f.path, Err: err}
	}
}

// AtPath reports whether the locked descriptor is still the file at its
// path. A lock on a file that was unlinked or replaced after it was opened
// protects nothing, so callers retry when it is not. A locked file that is
// not a regular file, or that has another name, is refused.
func (f *File) AtPath() (bool, error) {
	var fst fileStat
	var pst unix.Stat_t
	if err := f.fstat(&fst); err != nil {
		return false, &fs.PathError{Op: "stat", Path: f.path, Err: err}
	}
	if err := refusedMode(f.path, durable.ModeOf(fst.mode), fst.nlink); err != nil {
		return false, err
	}
	f.size.Store(fst.size)
	f.perm.Store(fst.mode&0o777 | 1<<31) // the high bit says it is known
	// A direct call: through a func value pst would escape.
	if err := unix.Lstat(f.path, &pst); err != nil {
		if err == unix.ENOENT {
			return false, nil
		}
		return false, &fs.PathError{Op: "stat", Path: f.path, Err: err}
	}
	return fst.dev == uint64(pst.Dev) && fst.ino == uint64(pst.Ino), nil
}

// fileStat is what AtPath needs of the locked descriptor's stat.
type fileStat struct {
	dev, ino, nlink uint64
	mode            uint32
	size            int64
}

// Release drops the lock by closing the descriptor. It is idempotent. Close
// alone is enough, and saves a syscall per cycle: the descriptor is
// close-on-exec and never duplicated by this package, so no other
// descriptor shares its open file description and the lock goes with it. (A
// cgo fork() without exec would share it; the child then holds the lock
// until it exits, as flock(2) documents.)
func (f *File) Release() {
	if !f.released.CompareAndSwap(false, true) {
		return
	}
	unix.Close(f.fd)
}

// CarriesContent says whether a lock file's content can name its holder:
// true here, where WriteContent writes through the locked descriptor.
const CarriesContent = true

// WriteContent replaces the file's content with b while the lock is held:
// b is written at offset 0 first and the tail cut after, so that a reader
// never sees an empty file where there was content.
func (f *File) WriteContent(b []byte) error {
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(f.fd, b[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			f.size.Store(-1) // part of b may be there: the length is unknown
			return &fs.PathError{Op: "write", Path: f.path, Err: err}
		}
		off += n
	}
	// Another process may have written to the file since it was last
	// seen (a foreign program; never this package's callers): then the
	// size is unknown, or larger than ours, and the tail is cut.
	if old := f.size.Swap(int64(len(b))); old < 0 || old > int64(len(b)) {
		for {
			err := unix.Ftruncate(f.fd, int64(len(b)))
			if err == unix.EINTR { // a slow filesystem's truncate, interrupted by a signal
				continue
			}
			if err != nil {
				f.size.Store(-1)
				return &fs.PathError{Op: "truncate", Path: f.path, Err: err}
			}
			break
		}
	}
	return nil
}

// Empty reports whether the file was empty when this process last saw its
// length (AtPath's stat, or its own write), on a filesystem whose own kind
// excludes (where that length is never out of date): nothing in it to read.
func (f *File) Empty() bool { return f.local.Load() && f.size.Load() == 0 }

// ReadContent reads up to max bytes of the file through the locked
// descriptor.
func (f *File) ReadContent(limit int) ([]byte, error) {
	buf := make([]byte, limit)
	n := 0
	for n < limit {
		m, err := unix.Pread(f.fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: f.path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n < limit {
		f.size.Store(int64(n)) // read to the end: that is its length
	} else {
		f.size.Store(-1)
	}
	return buf[:n], nil
}

// testFlockFault, when set, is the error every flock(2) of this package
// fails with (SetFlockFault).
var testFlockFault atomic.Pointer[error]

// flock is flock(2), or testFlockFault.
func flock(fd, how int) error {
	if errno := testFlockFault.Load(); errno != nil {
		return *errno
	}
	return unix.Flock(fd, how)
}

// SetFlockFault makes every flock(2) of this package fail with errno, and
// returns a func that restores it: for tests of the packages above this one
// that need the faults only exotic filesystems give (ENOLCK).
func SetFlockFault(errno error) (restore func()) {
	old := testFlockFault.Swap(&errno)
	return func() { testFlockFault.Store(old) }
}

// WouldBlockErrno is the system's "would block" error, which a busy answer
// also stands for (syscall.EWOULDBLOCK); nil where there is none.
var WouldBlockErrno error = syscall.EWOULDBLOCK

// ProbeHeld reports whether someone holds an exclusive lock on path, by
// taking and at once dropping a non-blocking shared lock on a read-only
// descriptor. It creates nothing. It is the fallback where the kernel does
// not list lock holders; for the instant it holds the shared lock, a
// concurrent exclusive try-lock fails, so TryExclusive tries again while
// the only holders are probes that run. Its descriptor's flags (read-only,
// O_NONBLOCK, O_NOFOLLOW) are how locktable.ProbeOf knows a probe's lock
// from a holder's: keep them.
func ProbeHeld(path string) (held bool, err error) {
	fd, err := durable.OpenRetry(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if err == unix.ENOENT {
			return false, nil
		}
		return false, durable.OpenError(path, err)
	}
	defer unix.Close(fd)
	f := &File{path: path, fd: fd, mode: Shared}
	err = f.flock(unix.LOCK_SH, false)
	switch {
	case err == nil:
		unix.Flock(fd, unix.LOCK_UN)
		return false, nil
	case errors.Is(err, ErrWouldBlock):
		return true, nil
	}
	return false, err
}

// MakePrivate takes group and others' permissions off the locked file when
// it has any, so that no other user can open it to take a lock of their own:
// a shared lock by anyone who can read a lock file refuses its every
// exclusive locker. It returns the mode the file had when it was loosened,
// and an *fs.PathError (EPERM) when this process may not change it (it is
// another user's). It reads the mode from the fstat that took the lock,
// the first time, and from a new one after.
func (f *File) MakePrivate() (fs.FileMode, error) {
	perm := f.perm.Swap(0)
	if perm == 0 {
		var st unix.Stat_t
		if err := unix.Fstat(f.fd, &st); err != nil {
			return 0, &fs.PathError{Op: "stat", Path: f.path, Err: err}
		}
		perm = uint32(st.Mode)
	}
	mode := fs.FileMode(perm & 0o777)
	if mode&0o077 == 0 {
		return 0, nil
	}
	if err := unix.Fchmod(f.fd, uint32(mode&0o700)); err != nil {
		return mode, &fs.PathError{Op: "chmod", Path: f.path, Err: err}
	}
	return mode, nil
}

// Dup returns a new descriptor of the locked file's open file description,
// close-on-exec, as an *os.File: the same lock, for a child process to
// inherit (exec.Cmd.ExtraFiles). The lock is held until every descriptor of
// the description is closed, in every process that has one.
func (f *File) Dup() (*os.File, error) {
	fd, err := unix.FcntlInt(uintptr(f.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "dup", Path: f.path, Err: err}
	}
	return os.NewFile(uintptr(fd), f.path), nil
}

// TryLockExisting makes one try, without waiting, to lock the file at path
// in mode, only if it exists: it is opened without O_CREAT, so that nothing
// is created, and a missing file is an error satisfying errors.Is(err,
// fs.ErrNotExist). ErrWouldBlock (in an *fs.PathError) when the lock is
// held; a file replaced or removed while it was locked is ErrReplaced, not
// retried (a caller that must not create is looking at a directory being
// removed).
func TryLockExisting(path string, mode Mode) (*File, error) {
	flags := openExclusive &^ unix.O_CREAT
	if mode == Shared {
		flags = openShared &^ unix.O_CREAT
	}
	fd, err := durable.OpenRetry(path, flags, 0)
	if err != nil {
		return nil, durable.OpenError(path, err)
	}
	f := &File{path: path, fd: fd, mode: mode}
	f.size.Store(-1)
	if err := f.lock(false); err != nil {
		f.Release()
		return nil, err
	}
	same, err := f.AtPath()
	if err == nil && !same {
		err = &fs.PathError{Op: "lock", Path: path, Err: ErrReplaced}
	}
	if err == nil {
		err = f.judge(true)
	}
	if err != nil {
		f.Release()
		return nil, err
	}
	return f, nil
}
