//go:build !linux && !darwin

package daemon

import (
	"errors"
	"net"
	"os"
)

// handsOver is false here: a successor binds its endpoints anew, and a
// client may be refused between the old server's Close and the new one's
// bind.
const handsOver = false

func openRendezvous() (net.Listener, string) { return nil, "" }

func receiveFrom(net.Conn) ([]offer, []net.Listener, bool) { return nil, nil, false }

func sendTo(string, header, []*os.File) bool { return false }

func listenerFile(net.Listener) (*os.File, error) { return nil, errors.ErrUnsupported }

// acceptQueued is never possible here: an idle server closes at once.
func acceptQueued(net.Listener) (net.Conn, bool) { return nil, false }

// keepNonblocking does nothing here: no socket is shared with a successor.
func keepNonblocking(net.Listener) {}
