//go:build unix && !linux

package owner

import "golang.org/x/sys/unix"

// openDir opens a directory for its fstat: without O_PATH (Linux only), it
// needs read permission on it; a directory this user may not read is
// reported by its error, naming it.
const openDir = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

func openat(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, openDir, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}
