package daemon

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// The kernel's inet_diag ABI (linux/inet_diag.h, linux/sock_diag.h).
const (
	sizeofInetDiagReqV2 = 56 // family, protocol, ext, pad, states, inet_diag_sockid (48)
	sizeofInetDiagMsg   = 72 // family, state, timer, retrans, inet_diag_sockid, expires, rqueue, wqueue, uid, inode
	tcpListen           = 10 // TCP_LISTEN
)

// listenerUID is the uid of the TCP socket listening on addr's exact
// address and port in this network namespace: one exact lookup over
// NETLINK_SOCK_DIAG (SOCK_DIAG_BY_FAMILY without NLM_F_DUMP: the kernel
// finds the listener a connection to addr reaches, as it does for a SYN),
// not a scan of /proc/net/tcp.
func listenerUID(addr *net.TCPAddr) (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	req := diagRequest(addr)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return -1, fmt.Errorf("sock_diag: send: %w", err)
	}
	buf := make([]byte, 1024) // one inet_diag_msg, or an error: under 200 bytes
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("sock_diag: receive: %w", err)
		}
		return diagAnswer(buf[:n], addr)
	}
}

// diagRequest is the netlink message asking for the socket listening on
// addr: AF_INET for an IPv4 address (a dual-stack listener is found too),
// else AF_INET6.
func diagRequest(addr *net.TCPAddr) []byte {
	family, ip := uint8(unix.AF_INET6), addr.IP.To16()
	if ip4 := addr.IP.To4(); ip4 != nil {
		family, ip = unix.AF_INET, ip4
	}
	msg := make([]byte, unix.NLMSG_HDRLEN+sizeofInetDiagReqV2)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], 1) // sequence
	r := msg[unix.NLMSG_HDRLEN:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 1<<tcpListen)
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(addr.Port)) // sport; dport 0
	copy(id[4:20], ip)                                    // src; dst all zero
	ne.PutUint32(id[40:], 0xffffffff)                     // cookie: none (INET_DIAG_NOCOOKIE)
	ne.PutUint32(id[44:], 0xffffffff)
	return msg
}

// diagAnswer reads the kernel's answer: the listener's uid, or why there
// is none.
func diagAnswer(b []byte, addr *net.TCPAddr) (int, error) {
	if len(b) < unix.NLMSG_HDRLEN {
		return -1, fmt.Errorf("sock_diag: a short answer (%d bytes)", len(b))
	}
	ne := binary.NativeEndian
	typ := ne.Uint16(b[4:])
	body := b[unix.NLMSG_HDRLEN:]
	if l := int(ne.Uint32(b[0:])); l >= unix.NLMSG_HDRLEN && l <= len(b) {
		body = b[unix.NLMSG_HDRLEN:l]
	}
	switch {
	case typ == unix.NLMSG_ERROR && len(body) >= 4:
		errno := syscall.Errno(-int32(ne.Uint32(body)))
		if errno == unix.ENOENT {
			return -1, fmt.Errorf("sock_diag: no socket listens on %v", addr)
		}
		return -1, fmt.Errorf("sock_diag: lookup of %v: %w", addr, errno)
	case typ != unix.SOCK_DIAG_BY_FAMILY || len(body) < sizeofInetDiagMsg:
		return -1, fmt.Errorf("sock_diag: an answer of type %d and %d bytes", typ, len(body))
	}
	// A dual-stack IPv6 listener answers a lookup for an IPv4 address.
	if body[1] != tcpListen || int(binary.BigEndian.Uint16(body[4:])) != addr.Port {
		return -1, fmt.Errorf("sock_diag: the socket found for %v is not a listener on its port (state %d, port %d)", addr, body[1], binary.BigEndian.Uint16(body[4:]))
	}
	return int(ne.Uint32(body[64:])), nil
}
