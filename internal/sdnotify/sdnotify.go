// Package sdnotify sends a service manager's readiness notification: one
// datagram over the unixgram socket named by $NOTIFY_SOCKET, as systemd's
// sd_notify(3) does for a Type=notify unit. A name that begins with "@" is
// an abstract socket (Linux), the "@" standing for the leading NUL byte.
package sdnotify

import (
	"errors"
	"net"
	"os"
	"strconv"
)

// Env is the variable a service manager sets to the socket it listens on.
const Env = "NOTIFY_SOCKET"

// ErrNoSocket says there is no socket to notify: $NOTIFY_SOCKET is unset or
// empty.
var ErrNoSocket = errors.New("sdnotify: NOTIFY_SOCKET is not set")

// Ready is the message that says the service is ready, and which process is
// its main one.
func Ready(pid int) string {
	return "READY=1\nMAINPID=" + strconv.Itoa(pid)
}

// Send sends msg, in one datagram, to the socket named by socket (an "@"
// name is abstract). It returns ErrNoSocket for an empty name, and the
// system's error (a *net.OpError naming the socket) when the datagram could
// not be sent.
func Send(socket, msg string) error {
	if socket == "" {
		return ErrNoSocket
	}
	addr := &net.UnixAddr{Name: socket, Net: "unixgram"}
	if socket[0] == '@' {
		addr.Name = "\x00" + socket[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(msg))
	return err
}

// Socket is the socket $NOTIFY_SOCKET names, or "".
func Socket() string { return os.Getenv(Env) }
