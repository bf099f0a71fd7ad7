//go:build !unix

package main

import "os"

// finishSignal ends a job early, as finished: none outside Unix.
var finishSignal os.Signal
