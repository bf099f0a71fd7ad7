//go:build linux || darwin

package liveness

import (
	"context"
	"time"
)

// pollExit polls exited every 5 ms until it reports true (nil) or ctx ends
// (ctx.Err()). It is the wait of the paths that have nothing to block on.
func pollExit(ctx context.Context, exited func() (bool, error)) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		done, err := exited()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
