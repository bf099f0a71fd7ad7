//go:build linux

package etcd

import "golang.org/x/sys/unix"

// now is this machine's clock that keeps counting while the machine is
// suspended (CLOCK_BOOTTIME), in nanoseconds. Go's monotonic clock
// (CLOCK_MONOTONIC on Linux) stops during a suspend, so a deadline kept on
// it would be late by the length of the suspend, while etcd's clock ran.
func now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return monoNow()
	}
	return ts.Nano()
}
