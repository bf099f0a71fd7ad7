//go:build unix

package runnerstate

import (
	"os"
	"syscall"
)

// oNoFollow makes an open fail on a symlink at the last path element.
const oNoFollow = syscall.O_NOFOLLOW

// syncDir fsyncs a directory so that a rename or removal in it survives a
// power loss.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return pathError("open", dir, unwrapPathErr(err))
	}
	defer d.Close()
	if err := d.Sync(); err != nil && err != syscall.EINVAL { // EINVAL: a filesystem that cannot sync directories
		return pathError("fsync", dir, unwrapPathErr(err))
	}
	return nil
}

// dirKey identifies a directory by device and inode, so that two spellings of
// one directory are one key.
type dirKey struct{ dev, ino uint64 }

func keyOf(dir string) (dirKey, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return dirKey{}, pathError("stat", dir, err)
	}
	return dirKey{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}

// createPrivate creates path 0600 if it does not exist, without following a
// symlink, and leaves an existing file as it is. The runner lock is created
// so: a shared lock on it refuses every runner, and only its owner can open
// it to take one.
func createPrivate(path string) {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0o600)
	if err == nil {
		syscall.Close(fd)
	}
}
