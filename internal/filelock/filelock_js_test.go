package filelock

import "go.uber.org/goleak"

// The js/wasm runtime parks a goroutine of its own to handle events from the
// host.
func init() { leakOptions = append(leakOptions, goleak.IgnoreAnyFunction("runtime.handleEvent")) }
