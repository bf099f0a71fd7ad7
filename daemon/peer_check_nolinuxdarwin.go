//go:build !linux && !darwin

package daemon

import (
	"net"
	"syscall"
)

// peerUIDOf: no peer is checked here (Windows, the BSDs, other systems):
// Dial returns the connection without knowing who accepted it.
func peerUIDOf(net.Conn) (uid int, checked bool, err error) {
	return -1, false, nil
}

// bindControl: setSocketMode sets the mode once bound.
func bindControl(endpoint) func(network, address string, c syscall.RawConn) error {
	return nil
}
