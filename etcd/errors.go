package etcd

import (
	"context"
	"errors"
	"fmt"

	"github.com/runnerstate/runnerstate"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrSuperseded is Takeover's answer to a starter when a newer starter came
// for the same key: the newest starter wins, and the others step aside. It is
// the core's runnerstate.ErrSuperseded, so one errors.Is matches both.
var ErrSuperseded = runnerstate.ErrSuperseded

// BusyError is the answer of Campaign and Takeover when their context ends
// before they are admitted: the key is held, and Holder is who held it when
// the wait ended (the zero Holder when the key was free but the turn had not
// come, for instance behind older standbys).
//
// errors.Is(err, runnerstate.ErrBusy) is true, and Unwrap gives the context's
// error, so errors.Is(err, context.DeadlineExceeded) works as well.
type BusyError struct {
	Key    string // the key the caller passed
	Holder Holder // the leader when the wait ended; trust: as Running's

	err error // the context's error
}

func (e *BusyError) Error() string {
	msg := "runnerstate/etcd: key " + e.Key + " is held by " + holderName(e.Holder)
	if e.Holder.Token == 0 {
		msg = "runnerstate/etcd: key " + e.Key + ": not admitted when the wait ended (no leader then: its turn had not come, or etcd could not be reached)"
	}
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

// Is reports whether target is runnerstate.ErrBusy.
func (e *BusyError) Is(target error) bool { return target == runnerstate.ErrBusy }

// Unwrap returns the context's error that ended the wait.
func (e *BusyError) Unwrap() error { return e.err }

// holderName is a short human form of a leader: "pid 1234 (instance
// 0123abcd) on host-a, token 42".
func holderName(h Holder) string {
	s := h.Record.Process.String()
	if h.Record.Process.PID == 0 {
		s = "an unnamed leader"
	}
	if h.Record.Process.Hostname != "" {
		s += " on " + h.Record.Process.Hostname
	}
	return fmt.Sprintf("%s, token %d", s, h.Token)
}

// errorf formats an error whose message starts with the package's name.
func errorf(format string, args ...any) error {
	return fmt.Errorf("runnerstate/etcd: "+format, args...)
}

// Reasons a leadership or a wait ends, wrapped with the key by their users.
var (
	errReleased  = errors.New("released")
	errDeadline  = errors.New("its own safe deadline passed (no keepalive was acknowledged in time)")
	errLeaseGone = errors.New("its lease is gone (expired or revoked)")
	errKeyGone   = errors.New("the leader key was deleted or replaced")
	errLeaseLost = errors.New("this process's lease ran out while it waited (etcd unreachable for about a TTL)")
)

// transient reports whether err is worth a retry: etcd or the network was
// unavailable or slow, not a refusal.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code := status.Code(err)
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}
