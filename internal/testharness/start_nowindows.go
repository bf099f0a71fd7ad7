//go:build !windows

package testharness

// startFault: only Wine's process creation fails in a way a test may retry.
var startFault = func(error) bool { return false }
