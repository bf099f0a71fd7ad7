package daemon

import "golang.org/x/sys/unix"

// peerUID is the uid of the process at the other end of the unix socket fd
// (SO_PEERCRED), or -1.
func peerUID(fd int) int {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return -1
	}
	return int(cred.Uid)
}
