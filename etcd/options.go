package etcd

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/runnerstate/runnerstate"
)

// Options says how Campaign and Takeover hold a key. The zero value is the
// defaults. Durations are wall durations measured on this process's own
// monotonic clock; none is ever compared with a time another host wrote.
type Options struct {
	// TTL is the lease's time to live, in whole seconds, at least 2 s
	// (default 10 s): a TTL under 2 s or not in whole seconds is rounded up.
	// A leader that dies is replaced after about one TTL.
	//
	// The default outlasts an etcd leader election with etcd's default
	// settings (heartbeat 100 ms, election timeout 1000 ms: an election
	// takes 1 to 2 s, 2 to 4 s with a split vote, during which no keepalive
	// is acknowledged): the leader renews every quarter of its safe window
	// (TTL − SafetyMargin, 8 s by default), so at least 6 s are left when
	// an election starts. A smaller TTL is allowed (tests, a single-member
	// etcd, an etcd with a shorter election timeout); Campaign and Takeover
	// then log one warning naming the risk.
	TTL time.Duration
	// SafetyMargin is how long before its lease can expire the leader counts
	// its leadership ended and closes Lost (default max(TTL/5, 300 ms)). It
	// must be under half the TTL.
	SafetyMargin time.Duration
	// Mode is the restart request Takeover leaves for the leader first:
	// runnerstate.RestartNow (the default) or runnerstate.RestartDrain.
	Mode string
	// Grace is how long Takeover waits, from its start, before it upgrades
	// its request to "now" (default 5 s).
	Grace time.Duration
	// KillAfter is how long after Grace Takeover waits before it removes the
	// leader by force: its key is deleted and its lease revoked (default 5 s).
	KillAfter time.Duration
	// NoForce makes Takeover never remove a leader: it only asks, and the
	// wait ends with its context.
	NoForce bool
	// Dir, when set, is a local runner directory held for the whole
	// leadership: Takeover takes it with runnerstate.Takeover (with Mode,
	// Grace, KillAfter, and NoForce as NoSignal), Campaign with
	// runnerstate.Standby then runnerstate.Acquire, both before the cluster;
	// Release lets it go after the cluster. As the core's Takeover does, a
	// Takeover admitted locally waits, at most KillAfter, for the previous
	// local runner's process to exit: one that steps down should exit. Each
	// machine has its own Dir. Touches the files the core touches there.
	Dir string
	// Record is what the leader publishes on the leader key (and in Dir's
	// runner.json when Dir is set). PID and Process are filled in with this
	// process's identity; StartedAt with the admission time when zero.
	Record runnerstate.Record
	// Logger receives the steps (a request left, a forced removal, a
	// leadership's end); nil means slog.Default().
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultTTL       = 10 * time.Second
	DefaultGrace     = runnerstate.DefaultGrace
	DefaultKillAfter = runnerstate.DefaultKillAfter
	minTTL           = 2 * time.Second
	minMargin        = 300 * time.Millisecond
)

// resolve fills in the defaults and checks what cannot be defaulted.
func (o Options) resolve() (Options, error) {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	o.TTL = wholeSeconds(o.TTL)
	if o.SafetyMargin <= 0 {
		o.SafetyMargin = max(o.TTL/5, minMargin)
	}
	if o.SafetyMargin >= o.TTL/2 {
		return o, errorf("SafetyMargin %v must be under half the TTL (%v): raise the TTL or lower the margin", o.SafetyMargin, o.TTL)
	}
	if o.Mode == "" {
		o.Mode = runnerstate.RestartNow
	}
	if runnerstate.ModeStrength(o.Mode) == 0 {
		return o, fmt.Errorf("%w, not %q (Options.Mode)", runnerstate.ErrBadMode, o.Mode)
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.KillAfter <= 0 {
		o.KillAfter = DefaultKillAfter
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// wholeSeconds rounds d up to whole seconds, at least minTTL.
func wholeSeconds(d time.Duration) time.Duration {
	d = (d + time.Second - 1).Truncate(time.Second)
	return max(d, minTTL)
}

// The keys under a leader key K. Every one but K itself is K followed by a
// slash, so a watch of [K, K+"0") sees them all.
//
//	K                 the leader: its Record as JSON, on the leader's lease
//	K/forced          a leader removed by force: the next admission waits its TTL
//	K/released        the token of a leader that called Release: admit at once
//	K/restart         the restart request for the leader, on the leader's lease
//	K/standby/<lease> a Campaign waiter: its Identity, on its lease
//	K/waiting/<lease> a Takeover starter: its Identity, on its lease
type keys struct{ leader, forced, released, restart, standby, waiting, end string }

func keysOf(key string) (keys, error) {
	if key == "" || strings.HasSuffix(key, "/") {
		return keys{}, errorf("key %q: want a non-empty key that does not end with a slash, such as /myapp/runner", key)
	}
	return keys{
		leader:   key,
		forced:   key + "/forced",
		released: key + "/released",
		restart:  key + "/restart",
		standby:  key + "/standby/",
		waiting:  key + "/waiting/",
		end:      key + "0",
	}, nil
}
