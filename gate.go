package runnerstate

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/gate"
)

// The takeover gate: gate.json holds a gate.State (internal/gate). It is
// read and written only under the directory's state lock, and written
// atomically but without fsync: it describes live processes, and after a
// power loss none of them is left.
type (
	gateState      = gate.State
	gateEntry      = gate.Entry
	gateEscalation = gate.Escalation
)

// readGate reads gate.json; a missing or unreadable one is an empty gate (the
// problem is logged once, and the next writer replaces it), with a warning
// for Status.
func readGate(dir string) (gateState, string) {
	path := filepath.Join(dir, gateName)
	g, state, err := gate.Read(dir)
	if err = public(err); state != fileCorrupt {
		return g, ""
	}
	infoOnce("gate:"+err.Error(), "runnerstate: ignoring a takeover gate that cannot be read", "path", path, "err", err)
	if unusablePath(err) {
		// Not a file a writer may replace: Takeover refuses it.
		return gateState{}, fmt.Sprintf("%v; Takeover refuses the directory until it is moved away", err)
	}
	return gateState{}, fmt.Sprintf("%v; it is ignored, and the next Takeover replaces it", err)
}

// updateGate runs fn on the gate under dir's state lock and writes the result
// back. fn runs with the lock held; it must not take the state lock itself
// (see withStateLockCtx). One that touches other state files with the
// *Locked helpers takes the lock with withStateLockCtx and calls
// updateGateLocked with its token.
func updateGate(ctx context.Context, dir string, fn func(g *gateState) error) error {
	return withStateLockCtx(ctx, dir, func(held stateHeld) error { return updateGateLocked(held, fn) })
}

// updateGateLocked is updateGate for a caller that holds the state lock.
func updateGateLocked(held stateHeld, fn func(g *gateState) error) error {
	dir := held.dir
	g, _ := readGate(dir)
	g.Prune()
	if err := fn(&g); err != nil {
		return err
	}
	data, err := protocolLine(g)
	if err != nil {
		return err
	}
	return public(durable.WriteVolatileToAll(dir, gateName, data))
}

// waitingStarters lists the live starters waiting in Takeover for dir, oldest
// first, and a warning when the gate file cannot be read.
func waitingStarters(dir string) ([]Identity, string) {
	g, warn := readGate(dir)
	var ids []Identity
	for _, e := range g.Waiting {
		if e.Live() {
			ids = append(ids, Identity(e.Starter))
		}
	}
	return ids, warn
}
