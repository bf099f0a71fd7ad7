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
