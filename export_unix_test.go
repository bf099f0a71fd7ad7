//go:build linux

package runnerstate

import "github.com/runnerstate/runnerstate/internal/filelock"

// injectFlockError makes every flock(2) fail with errno until restore is
// called.
func injectFlockError(errno error) (restore func()) { return filelock.SetFlockFault(errno) }
