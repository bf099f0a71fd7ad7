//go:build !linux && !darwin && !windows

// On an OS this package does not know, it proves nothing: Lookup fails with
// errors.ErrUnsupported, and Check and Pin answer Unverifiable for every
// record that rules 1 to 4 of Check do not settle.

package liveness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
)

const startIsBootRelative = true // unknown unit: never trust it without a boot id

var errUnsupported = fmt.Errorf("liveness: process identity on %s: %w", runtime.GOOS, errors.ErrUnsupported)

func currentIdentity() Identity {
	return Identity{PID: os.Getpid(), Hostname: hostname()}
}

func lookup(int) (Identity, error) { return Identity{}, errUnsupported }

func pin(Identity) (*Process, Verdict, string) {
	return nil, Unverifiable, "process identity unsupported on " + runtime.GOOS
}

type handle struct{}

func (*handle) close() error { return nil }

func (*Process) verify() (Verdict, string) {
	return Unverifiable, "process identity unsupported on " + runtime.GOOS
}

func signalSupported(Signal) error { return errUnsupported }

func (*Process) signal(Signal) error { return errUnsupported }

func (*Process) exitedNow() bool { return false }

func (*Process) wait(context.Context) error { return errUnsupported }
