package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runnerstate/runnerstate"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
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
// come, for instance behind older standbys). When no etcd member answered
// during the last few seconds of the wait, the answer is not a BusyError
// but an error that names the endpoints and says etcd could not be reached.
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
		msg = "runnerstate/etcd: key " + e.Key + ": not admitted when the wait ended (no leader then: its turn had not come)"
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
	errLeaseLost = errors.New("this process's lease ran out while it waited (etcd unreachable for about a TTL, or etcd revoked it)")
	// errRegisterAgain: the lease went between its grant and the mark.
	errRegisterAgain = errors.New("the lease went before the mark was put")
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

// unreachableAfter is how long without an answer from any member makes etcd
// unreachable, for Campaign and Takeover (at least two keepalive intervals).
const unreachableAfter = 3 * time.Second

// unreachableError is the answer when no etcd member answered: for Campaign
// and Takeover, none during the last few seconds before ctx ended; for the
// one-shot calls, none before theirs did. It names the endpoints and does
// not satisfy runnerstate.ErrBusy: nobody was found holding anything.
// Unwrap gives the context's error (or the client's).
type unreachableError struct {
	key       string
	endpoints []string
	quiet     time.Duration // 0 for a one-shot call
	answered  bool          // a member answered earlier in the wait
	err       error
}

func (e *unreachableError) Error() string {
	why := "no member answered before the call's context ended"
	switch {
	case e.quiet > 0 && e.answered:
		why = fmt.Sprintf("no member answered during the last %v of the wait", e.quiet)
	case e.quiet > 0:
		why = "no member answered during the whole wait"
	}
	return fmt.Sprintf("runnerstate/etcd: key %s: etcd could not be reached at %s (%s): check the endpoints, that etcd runs there and that its members have a quorum: %v",
		e.key, strings.Join(e.endpoints, ","), why, e.err)
}

func (e *unreachableError) Unwrap() error { return e.err }

// unreachable is the error for a wait that heard nothing during quiet.
func unreachable(cli *clientv3.Client, key string, quiet time.Duration, answered bool, err error) error {
	return &unreachableError{key: key, endpoints: cli.Endpoints(), quiet: quiet, answered: answered, err: err}
}

// callError wraps the error of a one-shot call (Running, Status,
// RequestRestart): one that got no answer from etcd says so and names the
// endpoints; etcd's own refusals are wrapped as they are.
func callError(cli *clientv3.Client, key, what string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded {
		return &unreachableError{key: key, endpoints: cli.Endpoints(), err: err}
	}
	return errorf("key %s: %s%w", key, what, err)
}

// minEtcdVersion is the oldest etcd server the package's guarantee holds
// on: older ones can revoke a live leader's lease (a stale raft leader,
// resumed after a pause, still expires leases it no longer owns; upstream
// etcd issues 12528 and 15247, fixed in 3.5.13).
const minEtcdVersion = "3.5.13"

// warnedVersion records the endpoint lists already checked.
var warnedVersion sync.Map

// checkVersion logs a warning, once per endpoint list and process, when
// the member that answers is older than minEtcdVersion. Best effort: one
// Status call bounded by ctx; no answer is no warning.
func checkVersion(ctx context.Context, cli *clientv3.Client, log *slog.Logger) {
	eps := cli.Endpoints()
	if len(eps) == 0 {
		return
	}
	if _, seen := warnedVersion.LoadOrStore(strings.Join(eps, ","), true); seen {
		return
	}
	for _, ep := range eps {
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // a frozen member must not hold the caller
		resp, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			continue
		}
		if older(resp.Version, minEtcdVersion) {
			log.Warn("runnerstate/etcd: this etcd is older than the minimum the guarantee holds on: a stale raft leader can revoke a live leader's lease (etcd issues 12528 and 15247); upgrade etcd",
				"endpoint", ep, "version", resp.Version, "minimum", minEtcdVersion)
		}
		return
	}
}

// older reports whether version v (such as "3.4.23") is older than floor.
// An unparsable version is not older.
func older(v, floor string) bool {
	parse := func(s string) ([3]int, bool) {
		var out [3]int
		parts := strings.SplitN(strings.SplitN(s, "-", 2)[0], ".", 3)
		if len(parts) != 3 {
			return out, false
		}
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil {
				return out, false
			}
			out[i] = n
		}
		return out, true
	}
	a, ok1 := parse(v)
	b, ok2 := parse(floor)
	if !ok1 || !ok2 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
