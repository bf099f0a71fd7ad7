//go:build !unix && !windows

package runnerstate

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// On a system without file locks (js, wasip1, plan9) the package builds, and
// every call that locks answers ErrLockingUnsupported at run time.
func TestNoLocksAnswersErrLockingUnsupported(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	calls := map[string]func() error{
		"Acquire": func() error { _, err := Acquire(dir); return err },
		"Takeover": func() error {
			_, err := Takeover(ctx, filepath.Join(dir, "t"), TakeoverOptions{})
			return err
		},
		"Lock":          func() error { _, err := Lock(ctx, filepath.Join(dir, "x.lock")); return err },
		"TryLock":       func() error { _, err := TryLock(filepath.Join(dir, "x.lock")); return err },
		"RLock":         func() error { _, err := RLock(ctx, filepath.Join(dir, "x.lock")); return err },
		"AcquireScope":  func() error { _, err := AcquireScope(ctx, filepath.Join(dir, "s"), dir); return err },
		"NoSyncRunning": func() error { _, err := NoSyncRunning(dir); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrLockingUnsupported) {
			t.Errorf("%s: %v, want ErrLockingUnsupported", name, err)
		}
	}
}
