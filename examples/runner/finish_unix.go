//go:build unix

package main

import (
	"os"
	"syscall"
)

// finishSignal ends a job early, as finished.
var finishSignal os.Signal = syscall.SIGUSR1
