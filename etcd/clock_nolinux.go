//go:build !linux

package etcd

// now is this machine's clock for deadlines, in nanoseconds: Go's monotonic
// clock here (on Linux, CLOCK_BOOTTIME, which also counts a suspend).
func now() int64 { return monoNow() }
