//go:build unix

package durable

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// modeBits: file modes say who may write (see OpenToAll).
const modeBits = true

// oNoFollow makes an open fail on a symlink at the last path element.
const oNoFollow = syscall.O_NOFOLLOW

// ReadFile reads up to max bytes of the regular file at path without
// following a symlink, without creating it and without blocking on a FIFO:
// how a process that does not hold a lock reads what the holder wrote (a
// hint, never authority). A missing file is an error satisfying
// errors.Is(err, fs.ErrNotExist). A file larger than max returns its first
// max bytes and ErrTooLarge.
func ReadFile(path string, limit int) ([]byte, error) {
	data, _, err := ReadFileID(path, limit)
	return data, err
}

// FileID names the file a read found at a path: its device and inode
// numbers (zero where the system has none to give), and its owner's uid
// (-1 where the system has none), from the fstat of the descriptor read.
type FileID struct {
	Dev, Ino uint64
	UID      int
}

// ReadFileID is ReadFile, and also says which file it read, from the same
// fstat that checked it is a regular file: the caller need not look the
// path up again.
func ReadFileID(path string, limit int) ([]byte, FileID, error) {
	fd, err := OpenRetry(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, FileID{}, OpenError(path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, FileID{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	id := FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino), UID: int(st.Uid)}
	if err := CheckMode(path, ModeOf(uint32(st.Mode))); err != nil {
		return nil, id, err
	}
	data, err := readAll(fd, path, limit, st.Size)
	return data, id, err
}

// readAll reads up to limit bytes of the open regular file fd of size.
func readAll(fd int, path string, limit int, fsize int64) ([]byte, error) {
	size := limit
	if fsize >= 0 && fsize < int64(limit) {
		size = int(fsize) + 1 // +1 to see a file that grew since fstat
	}
	buf := make([]byte, size)
	n := 0
	for n < size {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
		if int64(n) == fsize && n < size {
			// All fstat said there was: these files are replaced whole,
			// never appended to, so the read that would return 0 is saved.
			break
		}
	}
	if n == limit && fsize > int64(limit) {
		return buf[:n], ErrTooLarge
	}
	return buf[:n], nil
}

// replaceFile renames oldPath over newPath: rename(2) replaces it
// atomically, whoever has it open.
func replaceFile(oldPath, newPath string) error { return os.Rename(oldPath, newPath) }

// OpenRetry is open(2), tried again when a signal interrupts it (a slow
// filesystem, NFS or FUSE, lets EINTR through where a local disk never does).
func OpenRetry(path string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Open(path, flags, perm)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// OpenError turns an open(2) failure of path into an *fs.PathError that
// says, where it helps, what to do: a symlink met by O_NOFOLLOW is ErrSymlink
// (ELOOP; EMLINK is FreeBSD's answer), a directory ErrIsDir. ELOOP met on
// the way to path (a loop of symlinks in its directory's path) is that, and
// names the directory.
func OpenError(path string, err error) error {
	switch err {
	case unix.ELOOP, unix.EMLINK:
		dir := filepath.Dir(path)
		if _, serr := os.Stat(dir); errors.Is(serr, unix.ELOOP) {
			return &fs.PathError{Op: "open", Path: dir, Err: err}
		}
		return refused(path, ErrSymlink)
	case unix.EISDIR:
		return refused(path, ErrIsDir)
	}
	return &fs.PathError{Op: "open", Path: path, Err: err}
}

// ModeOf converts a stat(2) st_mode into an fs.FileMode's type bits.
func ModeOf(mode uint32) fs.FileMode {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	}
	return fs.ModeDevice
}

// SyncDir fsyncs a directory so that a rename or removal in it survives a
// power loss. A filesystem that cannot sync directories (EINVAL) is not an
// error.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: Unwrap(err)}
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return &fs.PathError{Op: "fsync", Path: dir, Err: Unwrap(err)}
	}
	return nil
}

// Key identifies a directory: its device and inode, so that two spellings
// of one directory are one key.
type Key struct{ dev, ino uint64 }

// KeyOf returns dir's Key.
func KeyOf(dir string) (Key, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return Key{}, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	return Key{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}

// GiveToDirOwner gives fd, a file this process just created in dir, to
// dir's owner when this process is root and dir is another user's (an
// operator managing a user's daemon): that user's runner can then still
// write it. Anywhere else it does nothing; a failure is left to the
// caller's next step to meet.
func GiveToDirOwner(fd int, dir string) {
	if os.Geteuid() != 0 {
		return
	}
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil || st.Uid == 0 {
		return
	}
	unix.Fchown(fd, int(st.Uid), int(st.Gid))
}

// ErrChanged is Rewrite's answer when the file at path is not a single
// regular file of its own any more (another name links it).
var ErrChanged = errors.New("has another name (a hard link); not rewritten in place")

// Rewrite rewrites the regular file at path in place, through one
// descriptor opened without O_CREAT (never through a symlink, never
// blocking on a FIFO): it reads at most limit bytes, asks update for the
// new content (write false: leave it as it is), writes that at offset 0
// and cuts the tail. It creates no file, not even a temporary one: a
// missing file is an error satisfying errors.Is(err, fs.ErrNotExist), and
// a file unlinked since it was opened is written where nobody reads it.
// It is neither atomic nor synced: a reader may see a mix of old and new
// bytes, which the caller's readers must treat as unreadable (the caller
// serialises its writers). Errors are *fs.PathError naming path.
func Rewrite(path string, limit int, update func(old []byte) (data []byte, write bool)) error {
	fd, err := OpenRetry(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return OpenError(path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := CheckMode(path, ModeOf(uint32(st.Mode))); err != nil {
		return err
	}
	if st.Nlink > 1 {
		return &fs.PathError{Op: "rewrite", Path: path, Err: ErrChanged}
	}
	old := make([]byte, 0, min(int(st.Size)+1, limit))
	buf := make([]byte, 4096)
	for len(old) < limit {
		n, err := unix.Pread(fd, buf[:min(len(buf), limit-len(old))], int64(len(old)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		old = append(old, buf[:n]...)
	}
	data, write := update(old)
	if !write {
		return nil
	}
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(fd, data[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "write", Path: path, Err: err}
		}
		off += n
	}
	for {
		err := unix.Ftruncate(fd, int64(len(data)))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "truncate", Path: path, Err: err}
		}
		return nil
	}
}

// ReadTail reads the regular file at path from offset from, or from its
// last limit bytes when more was written since from: what an appended log
// says since from, at most limit bytes, without reading the rest. It
// refuses what ReadFile refuses (a symlink, a directory, a FIFO...); a
// missing file satisfies errors.Is(err, fs.ErrNotExist).
func ReadTail(path string, from int64, limit int) ([]byte, error) {
	return ReadTailBefore(path, from, -1, limit)
}

// ReadTailBefore is ReadTail of the file cut at offset to (to < 0: not
// cut): what was written between from and to, at most its last limit
// bytes.
func ReadTailBefore(path string, from, to int64, limit int) ([]byte, error) {
	fd, err := OpenRetry(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, OpenError(path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := CheckMode(path, ModeOf(uint32(st.Mode))); err != nil {
		return nil, err
	}
	end := st.Size
	if to >= 0 {
		end = min(end, to)
	}
	off := max(from, end-int64(limit))
	if off >= end {
		return nil, nil
	}
	buf := make([]byte, end-off)
	n := 0
	for n < len(buf) {
		m, err := unix.Pread(fd, buf[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}
