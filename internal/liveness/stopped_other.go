//go:build !linux

package liveness

// Stopped reports whether id's process is stopped; only Linux can tell
// (from /proc/<pid>/stat): elsewhere it is never reported.
func Stopped(Identity) (bool, byte) { return false, 0 }
