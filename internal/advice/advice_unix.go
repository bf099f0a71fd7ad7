//go:build unix

package advice

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// For says what to do about the system error in err's chain, for the
// errors a state or lock file meets (see Advise); "" when there is none to
// give.
func For(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return ""
	}
	switch errno {
	case unix.ENOSPC:
		return "free space on that filesystem, then try again"
	case unix.EDQUOT:
		return "free space or raise the disk quota, then try again"
	case unix.EIO:
		return "the disk reported an error: check the device and the kernel log (dmesg) before trusting it"
	case unix.EMFILE:
		return "this process has no file descriptor left: close files or raise its limit (ulimit -n)"
	case unix.ENFILE:
		return "the system has no file descriptor left: close files or raise fs.file-max"
	case unix.EROFS:
		return "remount the filesystem read-write, or move the directory to one that is"
	case unix.EACCES, unix.EPERM:
		return "run as a user allowed to use that path, or fix its permissions"
	case unix.EINTR, unix.EAGAIN, unix.EBUSY:
		return "try again"
	case unix.ENOMEM:
		return "the system is short of memory: try again later"
	case unix.ENAMETOOLONG:
		return "use a shorter path"
	case unix.ESTALE:
		return "the network filesystem no longer knows the file: try again, or remount it"
	case unix.ENOLCK:
		return "move the directory to a local disk"
	}
	return ""
}

// blockedDir returns the directory on the way to path (path itself
// excluded) that this process may not enter, the one nearest the root, or
// "" when it may enter every one, or cannot tell.
func blockedDir(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	var dirs []string
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if unix.Faccessat(unix.AT_FDCWD, dirs[i], unix.X_OK, unix.AT_EACCESS) == unix.EACCES {
			return dirs[i]
		}
	}
	return ""
}

// unwritableDir is the directory of path when path does not exist and this
// process may not create files in that directory (write and search
// permission, as for the effective ids), else "": then a permission error
// on creating path is the directory's.
func unwritableDir(path string) string {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	dir := filepath.Dir(path)
	if unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS) == unix.EACCES {
		return dir
	}
	return ""
}

// dirDescription says who may enter dir: its mode and owner.
func dirDescription(dir string) string {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return ""
	}
	return fmt.Sprintf(": %v, owner uid %d, group gid %d; this process is uid %d", fs.FileMode(st.Mode&0o777)|fs.ModeDir, st.Uid, st.Gid, os.Geteuid())
}
