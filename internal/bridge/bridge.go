// Package bridge carries what package daemon says of a starter to the root
// package's Takeover without making it public API: a value in the
// Takeover's context (WithStarter, StarterOf). It holds no hook: nothing
// here is set at init, and nothing here imports the root.
package bridge

import "context"

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
	// same Program with the same or a newer Version (internal/version
	// orders them). Decided in the gate, under the state lock.
	Yield bool
	// Linger says this starter can take a lingering predecessor (one that
	// steps down and goes on serving the connections it holds): recorded
	// in its gate entry ("linger": true).
	Linger bool
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
