//go:build !unix && !windows

package filelock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// On a system without file locks every lock answers ErrUnsupported at run
// time, naming the path, and nothing is created.
func TestNoLocksHere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if _, err := TryLock(path, Exclusive, 0o644); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("TryLock: %v, want ErrUnsupported", err)
	}
	if _, err := Lock(context.Background(), path, Shared, 0o644); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Lock: %v, want ErrUnsupported", err)
	}
	if _, err := ProbeHeld(path); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("ProbeHeld: %v, want ErrUnsupported", err)
	}
}
