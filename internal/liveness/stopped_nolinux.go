//go:build !linux

package liveness

// Stopped reports whether id's process is stopped; only Linux can tell
// (from /proc/<pid>/stat): elsewhere it is never reported.
func Stopped(Identity) (bool, byte) { return false, 0 }

// Exiting reports whether id's process is on its way out; only Linux can
// tell (from /proc/<pid>/task/*/stat): elsewhere it is never reported.
func Exiting(Identity) bool { return false }
