package spawn

import (
	"errors"
	"net"
	"os"
	"strconv"
)

// A service manager's readiness notification, the other readiness a runner
// owes: one datagram over the unixgram socket named by $NOTIFY_SOCKET
// (NotifySocketEnv), as systemd's sd_notify(3) does for a Type=notify unit.
// A name that begins with "@" is an abstract socket (Linux), the "@"
// standing for the leading NUL byte.

// ErrNoNotifySocket says there is no socket to notify: $NOTIFY_SOCKET is
// unset or empty.
var ErrNoNotifySocket = errors.New("NOTIFY_SOCKET is not set")

// NotifySocket is the socket $NOTIFY_SOCKET names, or "".
func NotifySocket() string { return os.Getenv(NotifySocketEnv) }

// NotifyReadyMessage is the message that says the service is ready, and
// which process is its main one.
func NotifyReadyMessage(pid int) string {
	return "READY=1\nMAINPID=" + strconv.Itoa(pid)
}

// Notify sends msg, in one datagram, to the socket named by socket (an "@"
// name is abstract). It returns ErrNoNotifySocket for an empty name, and
// the system's error (a *net.OpError naming the socket) when the datagram
// could not be sent.
func Notify(socket, msg string) error {
	if socket == "" {
		return ErrNoNotifySocket
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
