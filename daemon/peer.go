package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// ErrUntrustedPeer is Dial's answer when the process that accepted its
// connection runs as neither the user of the directory's verified server
// nor root: the socket file, or the address, is another user's. The
// connection was closed before anything was sent on it.
var ErrUntrustedPeer = errors.New("daemon: the peer is not the server's user")

// overflowUID is the uid the kernel shows for a user that is not mapped in
// this user namespace: two such users cannot be told apart, so it is never
// trusted.
const overflowUID = 65534

// checkPeer is the outcome of Dial's connect to ep, the endpoint of the
// verified server rec: a connection whose peer runs as rec's user or as
// root is returned; any other is closed, and the error satisfies
// ErrUntrustedPeer. A connection refused for want of permission (EACCES)
// gets the socket file's mode and ep.Mode said. A server that went away
// before its user could be read gives a refusal Dial tries again after
// looking again (ECONNRESET).
func checkPeer(c net.Conn, err error, ep runnerstate.Endpoint, rec runnerstate.Record) (net.Conn, error) {
	if err != nil {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("%w (%s)", err, modeWords(ep))
		}
		return nil, err
	}
	peer, checked, perr := peerUIDOf(c)
	if !checked || (perr == nil && peer == 0) {
		return c, nil
	}
	holder, herr := liveness.UID(liveness.Identity(rec.Process))
	switch {
	case perr != nil:
		c.Close()
		return nil, fmt.Errorf("%w: cannot tell who accepted the connection (%v); the connection was closed", ErrUntrustedPeer, perr)
	case herr != nil && errors.Is(herr, liveness.ErrNotAlive):
		c.Close()
		return nil, fmt.Errorf("the server went away before its user could be read (%v): %w", herr, syscall.ECONNRESET)
	case herr != nil:
		c.Close()
		return nil, fmt.Errorf("%w: uid %s accepted the connection, and the server's user cannot be read (%v); the connection was closed", ErrUntrustedPeer, uidWords(peer), herr)
	case peer == holder && peer != overflowUID:
		return c, nil
	}
	c.Close()
	why := "the socket or the address is not the server's: another user's process answers there"
	if peer == overflowUID {
		why = "that uid is the kernel's for a user this namespace does not map, and is never trusted"
	}
	return nil, fmt.Errorf("%w: uid %s accepted the connection, but the server (pid %d) runs as uid %s: %s; the connection was closed", ErrUntrustedPeer, uidWords(peer), rec.PID, uidWords(holder), why)
}

// uidWords is a uid with its user name when it resolves: "1002 (mallory)".
func uidWords(uid int) string {
	s := strconv.Itoa(uid)
	if u, err := user.LookupId(s); err == nil && u.Username != "" {
		s += " (" + u.Username + ")"
	}
	return s
}

// defaultSocketMode is a unix socket file's mode when Endpoint.Mode is 0:
// only its owner (and root) may connect.
const defaultSocketMode os.FileMode = 0o600

// socketMode is the mode e's socket file is given.
func socketMode(e runnerstate.Endpoint) os.FileMode {
	if e.Mode == 0 {
		return defaultSocketMode
	}
	return e.Mode
}

// modeWords says the mode of ep's socket file and ep.Mode, for a client
// that may not connect to it.
func modeWords(ep runnerstate.Endpoint) string {
	if ep.Network != "unix" || strings.HasPrefix(ep.Address, "@") {
		return "this user may not reach the address"
	}
	file := "the socket file's mode cannot be read"
	if fi, err := os.Stat(ep.Address); err == nil {
		file = fmt.Sprintf("the socket file is mode %#o", fi.Mode().Perm())
	}
	asked := fmt.Sprintf("Endpoint.Mode %#o", ep.Mode)
	if ep.Mode == 0 {
		asked = "Endpoint.Mode 0 (0600: its owner only)"
	}
	return fmt.Sprintf("%s, %s; a server lets its group's users connect with Endpoint.Mode 0660, everyone with 0666", file, asked)
}

// checkMode refuses a Mode that is not a permission, or that is given for an
// endpoint without a socket file (tcp, an abstract socket).
func checkMode(i int, e endpoint) error {
	switch {
	case e.Mode == 0:
		return nil
	case e.Mode&^fs.ModePerm != 0:
		return fmt.Errorf("daemon: endpoint %d (%s %s): Mode %v is not a permission: give only its bits (0600, 0660 or 0666)", i, e.Network, e.Address, e.Mode)
	case e.Network != "unix" || e.abstract:
		return fmt.Errorf("daemon: endpoint %d (%s %s): Mode %#o applies to a unix socket file only: this endpoint has none", i, e.Network, e.Address, e.Mode)
	}
	return nil
}

// setSocketMode gives e's socket file its mode (socketMode), whatever the
// umask it was bound under, and whichever server bound it (a socket handed
// over keeps its file), and returns the mode to publish. Windows has no
// such modes: nothing is set there, and 0 is published.
func setSocketMode(e endpoint) (os.FileMode, error) {
	if e.Network != "unix" || e.abstract || runtime.GOOS == "windows" {
		return 0, nil
	}
	mode := socketMode(e.Endpoint)
	if err := os.Chmod(e.Address, mode); err != nil {
		return 0, fmt.Errorf("daemon: listen on unix %s: set its mode %#o: %w", e.Address, mode, err)
	}
	return mode, nil
}
