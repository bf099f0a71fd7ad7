package owner

import "golang.org/x/sys/unix"

// openDir opens a directory for its fstat only: O_PATH needs no read or
// search permission on it, and follows no symlink with O_NOFOLLOW.
const openDir = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

func openat(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, openDir, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
