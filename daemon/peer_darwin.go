package daemon

import "golang.org/x/sys/unix"

// peerUID is the uid of the process at the other end of the unix socket fd
// (LOCAL_PEERCRED), or -1.
func peerUID(fd int) int {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1
	}
	return int(cred.Uid)
}
