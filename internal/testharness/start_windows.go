package testharness

import (
	"errors"

	"golang.org/x/sys/windows"
)

// startFault reports whether a start failed with ERROR_INTERNAL_ERROR, which
// is what Wine's CreateProcess answers when the new process ended before its
// startup completed, without an exit status (NtCreateUserProcess in Wine's
// dlls/ntdll/unix/process.c turns that into STATUS_INTERNAL_ERROR). The test
// binary has not run a line then, so a test may start it again. Seen once
// in CI, under Wine 8; .ci/windows/repro/spawn counts such failures.
var startFault = func(err error) bool { return errors.Is(err, windows.ERROR_INTERNAL_ERROR) }
