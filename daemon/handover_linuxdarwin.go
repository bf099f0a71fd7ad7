//go:build linux || darwin

package daemon

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// handsOver is true where listening sockets pass to the successor.
const handsOver = true

// maxHeader bounds a handover's header.
const maxHeader = 64 << 10

// openRendezvous listens on a fresh rendezvous: an abstract unix socket on
// Linux (no file), a socket in the per-user temporary directory elsewhere.
func openRendezvous() (net.Listener, string) {
	var b [8]byte
	rand.Read(b[:])
	addr := "@runnerstate-rv-" + hex.EncodeToString(b[:])
	if runtime.GOOS != "linux" {
		addr = filepath.Join(os.TempDir(), "rs-rv-"+hex.EncodeToString(b[:])+".sock")
		if len(addr) > maxSunPath() {
			return nil, ""
		}
	}
	ln, err := net.Listen("unix", addr)
	if err != nil {
		return nil, ""
	}
	if addr[0] != '@' {
		os.Chmod(addr, 0o600)
	}
	return ln, addr
}

// sameUser reports whether the peer of c runs as this process's user or as
// root: only such a peer may hand sockets over, or be handed them.
func sameUser(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	uid := -1
	raw.Control(func(fd uintptr) { uid = peerUID(int(fd)) })
	return uid == 0 || uid == os.Getuid()
}

// receiveFrom reads one handover from c: the offers and their listeners
// (nothing when c's peer is not this user's or the handover is malformed;
// every descriptor received is then closed), and whether the sender asks
// for an ack.
func receiveFrom(c net.Conn) ([]offer, []net.Listener, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok || !sameUser(uc) {
		return nil, nil, false
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, maxHeader+4)
	oob := make([]byte, unix.CmsgSpace(64*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	files := rights(oob[:oobn])
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	if err != nil || n < 4 {
		closeAll()
		return nil, nil, false
	}
	size := int(binary.BigEndian.Uint32(buf[:4]))
	if size > maxHeader {
		closeAll()
		return nil, nil, false
	}
	if n < 4+size {
		if _, err := io.ReadFull(uc, buf[n:4+size]); err != nil {
			closeAll()
			return nil, nil, false
		}
	}
	var h header
	if err := json.Unmarshal(buf[4:4+size], &h); err != nil || h.Protocol != handoverProtocol || len(h.Sockets) != len(files) {
		closeAll()
		return nil, nil, false
	}
	offers := make([]offer, 0, len(files))
	lns := make([]net.Listener, 0, len(files))
	for i, f := range files {
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			continue
		}
		if ul, ok := ln.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
		}
		offers = append(offers, h.Sockets[i])
		lns = append(lns, ln)
	}
	return offers, lns, h.Ack
}

// rights is the descriptors an SCM_RIGHTS message carried, close-on-exec.
func rights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "handed-over socket"))
		}
	}
	return files
}

// sendTo hands files, described by h, to the rendezvous at addr.
func sendTo(addr string, h header, files []*os.File) bool {
	c, err := net.DialTimeout("unix", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	if !sameUser(uc) {
		return false
	}
	data, err := json.Marshal(h)
	if err != nil || len(data) > maxHeader {
		return false
	}
	var msg bytes.Buffer
	binary.Write(&msg, binary.BigEndian, uint32(len(data)))
	msg.Write(data)
	fds := make([]int, len(files))
	for i, f := range files {
		// Not f.Fd(): it puts the descriptor in blocking mode, and the
		// mode belongs to the open file description that this server's
		// own listener shares: a receiver that dies before it sets it
		// back would leave this server's accept blocking in the kernel.
		fd, err := rawFD(f)
		if err != nil {
			return false
		}
		fds[i] = fd
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	n, _, err := uc.WriteMsgUnix(msg.Bytes(), unix.UnixRights(fds...), nil)
	if err == nil && n < msg.Len() {
		_, err = uc.Write(msg.Bytes()[n:])
	}
	if err != nil || !h.Ack {
		return err == nil
	}
	var b [1]byte
	_, err = io.ReadFull(uc, b[:])
	return err == nil && b[0] == 1
}

// listenerFile is a duplicate of ln's socket, to send.
func listenerFile(ln net.Listener) (*os.File, error) {
	switch l := ln.(type) {
	case *net.UnixListener:
		return l.File()
	case *net.TCPListener:
		return l.File()
	}
	return nil, errors.New("not a socket listener")
}

// acceptQueued accepts a connection already queued on ln, without waiting:
// false when none is.
func acceptQueued(ln net.Listener) (net.Conn, bool) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	nfd := -1
	raw.Control(func(fd uintptr) {
		syscall.ForkLock.RLock() // no child inherits it before it is close-on-exec
		defer syscall.ForkLock.RUnlock()
		for {
			n, _, err := unix.Accept(int(fd))
			if err == unix.EINTR || err == unix.ECONNABORTED {
				continue
			}
			if err == nil {
				unix.CloseOnExec(n)
				nfd = n
			}
			return
		}
	})
	if nfd < 0 {
		return nil, false
	}
	f := os.NewFile(uintptr(nfd), "accepted")
	defer f.Close()
	c, err := net.FileConn(f)
	return c, err == nil
}

// rawFD is f's descriptor, its mode left as it is (unlike os.File.Fd). It
// stays valid while f is open.
func rawFD(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := rc.Control(func(d uintptr) { fd = int(d) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// keepNonblocking puts ln's socket back in non-blocking mode if something
// took it out: the mode belongs to the open file description, which every
// process handed the socket shares, and net.FileListener in a receiver
// sets it blocking for an instant (os.File.Fd) before it sets it back. A
// receiver killed in between would leave this server's next accept
// waiting in the kernel, where no deadline reaches it (halt, Close and a
// lingering server's pause would wait for a client to come).
func keepNonblocking(ln net.Listener) {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		if flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err == nil && flags&unix.O_NONBLOCK == 0 {
			unix.SetNonblock(int(fd), true)
		}
	})
}
