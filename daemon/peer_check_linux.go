package daemon

import (
	"fmt"
	"net"
	"syscall"
)

// peerUIDOf is the uid of the process that accepted c: SO_PEERCRED for a
// unix socket (the credentials of the process that first listened on it,
// whoever it was handed to since), and for TCP the uid of the socket
// listening on the address c reached, from sock_diag.
func peerUIDOf(c net.Conn) (uid int, checked bool, err error) {
	switch c := c.(type) {
	case *net.UnixConn:
		raw, err := c.SyscallConn()
		if err != nil {
			return -1, true, err
		}
		uid = -1
		if cerr := raw.Control(func(fd uintptr) { uid = peerUID(int(fd)) }); cerr != nil {
			return -1, true, cerr
		}
		if uid < 0 {
			return -1, true, fmt.Errorf("SO_PEERCRED of %s answered nothing", c.RemoteAddr())
		}
		return uid, true, nil
	case *net.TCPConn:
		addr, ok := c.RemoteAddr().(*net.TCPAddr)
		if !ok {
			return -1, true, fmt.Errorf("the peer's address %v is not a TCP address", c.RemoteAddr())
		}
		uid, err := listenerUID(addr)
		return uid, true, err
	}
	return -1, false, nil
}

// bindControl gives a unix socket its mode before it is bound: the file
// bind makes takes the socket's mode less the umask, so that it is never,
// even for an instant, more open than socketMode (setSocketMode then sets
// exactly that mode once bound).
func bindControl(e endpoint) func(network, address string, c syscall.RawConn) error {
	if e.Network != "unix" || e.abstract {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = syscall.Fchmod(int(fd), uint32(socketMode(e.Endpoint))) }); cerr != nil {
			return cerr
		}
		return err
	}
}
