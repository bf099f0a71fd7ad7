//go:build linux

package bench

import (
	"time"

	"github.com/runnerstate/runnerstate/daemon"
)

// setLinger sets a server's Options.Linger: the one place the benchmarks
// name it, so that the lingering way differs from today's drain by this
// field alone.
func setLinger(o *daemon.Options, d time.Duration) error {
	o.Linger = d
	return nil
}
