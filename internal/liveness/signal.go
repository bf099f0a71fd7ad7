//go:build !plan9

package liveness

import "syscall"

// Signal is a signal [Process.Signal] can send: the system's own type.
type Signal = syscall.Signal

// The signals a takeover sends.
const (
	SIGTERM = syscall.SIGTERM
	SIGKILL = syscall.SIGKILL
)
