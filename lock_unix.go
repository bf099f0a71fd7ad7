//go:build unix

package runnerstate

import (
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockFile is one open file description carrying a flock(2) lock.
//
// flock locks belong to the open file description, not to the process, so two
// lockFiles on the same path exclude each other inside one process exactly as
// they do across processes, and closing some other descriptor of the same file
// (as os.ReadFile does) never drops the lock (unlike fcntl/POSIX locks).
type lockFile struct {
	path     string
	fd       int
	released atomic.Bool
}

// Flags for opening a lock file: never through a symlink (O_NOFOLLOW), never
// inherited by a child (O_CLOEXEC), never truncated (no O_TRUNC), and never
// blocking on a FIFO planted at the path (O_NONBLOCK, which regular files and
// flock(2) ignore; the non-regular file is refused right after).
const (
	lockOpenExclusive = unix.O_RDWR | unix.O_CREAT | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK
	lockOpenShared    = unix.O_RDONLY | unix.O_CREAT | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK
	// A directory is the caller's own path and may be reached through a
	// symlink (macOS's /tmp is one); only the files in it are never followed.
	lockOpenDir = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
)

// openLockFile opens path for locking. kind selects the open flags; a shared
// lock needs only read permission, so readers without write access to the lock
// file can still take it.
func openLockFile(path string, kind lockKind) (*lockFile, error) {
	flags := lockOpenExclusive
	switch kind {
	case kindShared:
		flags = lockOpenShared
	case kindDir:
		flags = lockOpenDir
	}
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, flags, 0o644)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, openError(path, err)
	}
	// Whether it is a regular file is checked by atPath, right after the
	// flock, with the same fstat that compares inodes: one syscall, not two.
	return &lockFile{path: path, fd: fd}, nil
}

// openError turns an open(2) failure into an error that names the path and,
// where it helps, what to do.
func openError(path string, err error) error {
	switch err {
	case unix.ELOOP, unix.EMLINK: // EMLINK: FreeBSD's answer to O_NOFOLLOW on a symlink
		return symlinkError(path)
	case unix.EISDIR:
		return isDirError(path)
	}
	return pathError("open", path, err)
}

// lock takes the flock. With block false it returns errWouldBlock at once when
// another open file description holds a conflicting lock.
func (l *lockFile) lock(exclusive, block bool) error {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if !block {
		how |= unix.LOCK_NB
	}
	for {
		err := flockSyscall(l.fd, how)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EWOULDBLOCK:
			return errWouldBlock
		case unix.ENOLCK, unix.EOPNOTSUPP, unix.ENOSYS:
			return unsupportedError(l.path, err)
		}
		return pathError("flock", l.path, err)
	}
}

// atPath reports whether the locked descriptor is still the file at l.path.
// A lock on a file that was unlinked or replaced after we opened it protects
// nothing, so callers retry when it is not.
func (l *lockFile) atPath(kind lockKind) (bool, error) {
	var fst, pst unix.Stat_t
	if err := unix.Fstat(l.fd, &fst); err != nil {
		return false, pathError("stat", l.path, err)
	}
	if kind != kindDir {
		if fst.Mode&unix.S_IFMT != unix.S_IFREG {
			return false, notRegular(l.path)
		}
		if fst.Nlink > 1 {
			// Another name for the same file: the identity written into a
			// lock file would land in (and release would empty) whatever
			// the other name is.
			return false, pathError("refusing", l.path, errHardLinked)
		}
	}
	var err error
	if kind == kindDir {
		err = unix.Stat(l.path, &pst)
	} else {
		err = unix.Lstat(l.path, &pst) // a direct call: through a func value pst would escape
	}
	if err != nil {
		if err == unix.ENOENT {
			return false, nil
		}
		return false, pathError("stat", l.path, err)
	}
	return fst.Dev == pst.Dev && fst.Ino == pst.Ino, nil
}

// release drops the lock by closing the descriptor. It is idempotent. Close
// alone is enough, and saves a syscall per cycle: the descriptor is
// close-on-exec and never duplicated, so no other descriptor shares its open
// file description and the lock goes with it. (A cgo fork() without exec
// would share it; the child then holds the lock until it exits, as flock(2)
// documents.)
func (l *lockFile) release() {
	if !l.released.CompareAndSwap(false, true) {
		return
	}
	unix.Close(l.fd)
}

// writeContent replaces the lock file's content with b while the lock is held:
// b is written at offset 0 first and the tail cut after, so a reader never sees
// an empty file where there was an identity.
func (l *lockFile) writeContent(b []byte) error {
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(l.fd, b[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return pathError("write", l.path, err)
		}
		off += n
	}
	if err := unix.Ftruncate(l.fd, int64(len(b))); err != nil {
		return pathError("truncate", l.path, err)
	}
	return nil
}

// readContent reads up to max bytes of the lock file through the locked
// descriptor.
func (l *lockFile) readContent(max int) ([]byte, error) {
	buf := make([]byte, max)
	n := 0
	for n < max {
		m, err := unix.Pread(l.fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, pathError("read", l.path, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}

// readHint reads up to max bytes of a file without following a symlink,
// without creating it and without blocking on a FIFO. It is how a process that
// does not hold a lock reads the holder's identity: a hint, never authority.
func readHint(path string, max int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil, err
		}
		return nil, openError(path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, pathError("stat", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return nil, isDirError(path)
		}
		return nil, notRegular(path)
	}
	size := max
	if st.Size >= 0 && st.Size < int64(max) {
		size = int(st.Size) + 1 // +1 to see a file that grew since fstat
	}
	buf := make([]byte, size)
	n := 0
	for n < size {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, pathError("read", path, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n == max && st.Size > int64(max) {
		return buf[:n], errTooLarge
	}
	return buf[:n], nil
}

// flockSyscall is flock(2); tests replace it to inject the faults only exotic
// filesystems give (ENOLCK).
var flockSyscall = unix.Flock

// wouldBlockErrno is what a *BusyError also matches with errors.Is.
var wouldBlockErrno error = syscall.EWOULDBLOCK

// probeHeld reports whether someone holds an exclusive lock on path, by taking
// and at once dropping a non-blocking shared lock on a read-only descriptor.
// It creates nothing. It is the fallback where the kernel does not list lock
// holders; for the instant it holds the shared lock, a concurrent exclusive
// try-lock fails, so Acquire retries a busy answer briefly where probes are
// used.
func probeHeld(path string) (held bool, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if err == unix.ENOENT {
			return false, nil
		}
		return false, openError(path, err)
	}
	defer unix.Close(fd)
	for {
		err = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	switch err {
	case nil:
		unix.Flock(fd, unix.LOCK_UN)
		return false, nil
	case unix.EWOULDBLOCK:
		return true, nil
	case unix.ENOLCK, unix.EOPNOTSUPP, unix.ENOSYS:
		return false, unsupportedError(path, err)
	}
	return false, pathError("flock", path, err)
}
