//go:build !linux && !darwin

package liveness

import (
	"errors"
	"fmt"
)

// uidOf: the kernel's credentials of another process are not read here.
func uidOf(id Identity) (int, error) {
	return -1, fmt.Errorf("liveness: uid of %v: not read on this system: %w", id, errors.ErrUnsupported)
}
