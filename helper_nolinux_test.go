//go:build !linux

package runnerstate

import (
	"errors"
	"os/exec"
	"testing"
)

// The answers of helper_linux_test.go where Linux's facilities are
// missing: the tests that need them skip, or leave out the expectation that
// does.

const canInjectLockErrors = false

// injectFlockError is never called here: tests check canInjectLockErrors.
func injectFlockError(error) (restore func()) { return func() {} }

func mkfifo(string) error { return errors.ErrUnsupported }

const canSeeBlockedWaiters = false

// blockedOn is never called here: tests check canSeeBlockedWaiters.
func blockedOn(testing.TB, string) int { return 0 }

// ownProcessGroup does nothing here: the tests that use it only check that
// nothing was signalled.
func ownProcessGroup(*exec.Cmd) {}
