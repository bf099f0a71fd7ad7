// Package bridge carries what the root package lends the cluster module
// (module github.com/runnerstate/runnerstate/etcd, which may import this
// package as part of the same project) and package daemon without making it
// public API. The root package sets each hook when it is initialised, and
// package daemon sets CompareVersions; nothing here imports the root.
package bridge

import (
	"context"
	"log/slog"
)

// PublishAdmission writes rec, a runnerstate.Record, as dir's runner.json
// for this process's hold of dir, with Ready false: the admission record, a
// runner's until its own first Publish. The cluster module writes a
// leader's local record with it when the leadership is taken, and package
// daemon a server's until its Ready, so that runnerstate.Start and Status
// wait for their own Publish. Its errors are runnerstate.Publish's. Set by
// the root package.
var PublishAdmission func(dir string, rec any) error

// MarkLeaving marks this process's hold of dir as going, for why (a
// restart mode, runnerstate.RestartLost, "idle" or "closed"): its
// runner.json says Ready false and Leaving why from then on, written only
// while it names this process and never after the hold's release, and a
// later Publish keeps the mark. It writes the mark even after the hold lost
// its lock file, when Publish refuses. Errors: one naming dir when this
// process does not hold it. Set by the root package; package daemon uses it.
var MarkLeaving func(dir, why string) error

// Starter is what package daemon says of a runnerstate.Takeover's caller,
// through its context (WithStarter): the Takeover records it in the gate.
type Starter struct {
	// Rendezvous is where this starter receives the listening sockets of
	// the server it replaces: a unix socket address ("@name": abstract).
	// Empty: it takes none.
	Rendezvous string
	// Yield makes the starter step aside (an error matching
	// runnerstate.ErrSuperseded) rather than register over, or be admitted
	// ahead of, a holder that is not leaving or a waiting starter of the
	// same Program with the same or a newer Version (CompareVersions
	// decides). Decided in the gate, under the state lock.
	Yield bool
}

type starterKey struct{}

// WithStarter returns ctx carrying s, for a runnerstate.Takeover.
func WithStarter(ctx context.Context, s Starter) context.Context {
	return context.WithValue(ctx, starterKey{}, s)
}

// StarterOf is what WithStarter put in ctx (zero when nothing).
func StarterOf(ctx context.Context) Starter {
	s, _ := ctx.Value(starterKey{}).(Starter)
	return s
}

// CompareVersions compares versions a and b: -1, 0 or +1 as a is older
// than, the same as, or newer than b, and ok false when either cannot be
// compared. Set by package daemon (semantic versions): the root package
// never parses versions, and a nil CompareVersions never yields.
var CompareVersions func(a, b string) (cmp int, ok bool)

// Waiting counts the live starters waiting in dir's takeover gate: a
// runner is coming. Set by the root package; package daemon uses it.
var Waiting func(dir string) int

// Successor is a starter that may receive a leaving server's sockets.
type Successor struct {
	PID        int    // the starter's process
	Instance   string // its instance
	Rendezvous string // where it receives them
	Admitted   bool   // the starter admitted last (it binds its listeners)
}

// Successors lists the live starters waiting for dir that have a
// rendezvous, newest first, then the one admitted last when it had one.
// Set by the root package; package daemon uses it.
var Successors func(dir string) []Successor

// Logger is the root package's logger: the one runnerstate.SetLogger set,
// else slog.Default() given warnings only. Set by the root package; package
// daemon logs there when its caller gave it no logger.
var Logger func() *slog.Logger

// OtherProgram is the root package's refusal of dir whose verified holder
// (pid) runs holderProgram, for a caller of program: an error matching
// runnerstate.ErrOtherProgram and runnerstate.ErrBusy naming both, or nil
// when either program is empty or they are the same. Set by the root
// package; package daemon's Dial uses it.
var OtherProgram func(dir string, pid int, holderProgram, program string) error
