//go:build !linux && !darwin

package liveness

import (
	"errors"
	"fmt"
)

// uid: the kernel's credentials of another process are not read here.
func (p *Process) uid() (int, error) {
	return -1, fmt.Errorf("liveness: uid of %v: not read on this system: %w", p.id, errors.ErrUnsupported)
}
