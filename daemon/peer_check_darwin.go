package daemon

import (
	"fmt"
	"net"
	"syscall"
)

// peerUIDOf is the uid of the process that accepted c over a unix socket
// (LOCAL_PEERCRED, as getpeereid reads it: the process that first listened
// on it). A TCP peer is not checked on macOS: its kernel tells no other
// process's socket owner.
func peerUIDOf(c net.Conn) (uid int, checked bool, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, false, nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, true, err
	}
	uid = -1
	if cerr := raw.Control(func(fd uintptr) { uid = peerUID(int(fd)) }); cerr != nil {
		return -1, true, cerr
	}
	if uid < 0 {
		return -1, true, fmt.Errorf("LOCAL_PEERCRED of %s answered nothing", uc.RemoteAddr())
	}
	return uid, true, nil
}

// bindControl: macOS takes no mode on a socket before bind; setSocketMode
// sets it once bound.
func bindControl(endpoint) func(network, address string, c syscall.RawConn) error {
	return nil
}
