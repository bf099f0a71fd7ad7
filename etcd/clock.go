package etcd

import "time"

// clockBase anchors monoNow on Go's monotonic clock.
var clockBase = time.Now()

// monoNow is Go's monotonic clock in nanoseconds since the package loaded.
func monoNow() int64 { return int64(time.Since(clockBase)) }

// until is how long from now to the clock value t (negative when past).
func until(t int64) time.Duration { return time.Duration(t - now()) }
