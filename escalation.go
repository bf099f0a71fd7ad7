package runnerstate

import (
	"time"

	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// When SIGTERM and SIGKILL are due: the one place a takeover decides it.
// graceFor says how long the holder a step is against has before SIGTERM,
// escalate when each signal is due, and nextLook when the wait looks
// again. The gate (internal/gate) only records what was sent; the step
// that sends it is takeover.step.

// unending is a grace that never ends: a holder given it is never
// signalled, and the wait for it ends with the caller's context.
const unending time.Duration = -1

// graceFor is the grace of a step against what held names (as target reads
// it: occ is the directory's occupancy), for a takeover with opts (after
// withDefaults), counted from the escalation's first request:
//
//   - orphans of a runner that is gone (only tree.lock held, no runner):
//     none, SIGTERM at once;
//   - otherwise opts.Grace when it is set;
//   - a runner whose runner.lock was lost (only tree.lock held, by it):
//     DefaultGrace, even for a drain: its own WatchRestart told it
//     RestartLost, so it is not draining;
//   - a drain asked with no Grace: unending, never signalled;
//   - otherwise DefaultGrace.
func graceFor(opts TakeoverOptions, held heldLock, occ occupancy) time.Duration {
	switch {
	case held == treeLockHeld && occ == occOrphans:
		return 0
	case opts.Grace > 0:
		return opts.Grace
	case held == treeLockHeld || opts.Mode != RestartDrain:
		return DefaultGrace
	}
	return unending
}

// escalate decides the next step against a holder that may be signalled,
// in the escalation e: SIGTERM once grace has passed since its first
// request, SIGKILL once killAfter has passed since the SIGTERM, each once
// (never a SIGTERM when grace is unending). It returns the signal due now
// (0 when none) and when the next step is due (zero when none is left). It
// is a pure function of its arguments: the caller records a signal it
// sends in e (gate.Escalation.Sent), so that every starter of the
// escalation sees it was sent.
func escalate(e gateEscalation, now time.Time, grace, killAfter time.Duration) (due liveness.Signal, next time.Time) {
	termDue := e.FirstRequestAt.Add(grace)
	switch {
	case e.TermAt.IsZero() && grace == unending:
		return 0, time.Time{} // no end to the grace: wait for the holder
	case e.TermAt.IsZero() && now.Before(termDue):
		return 0, termDue
	case e.TermAt.IsZero():
		return liveness.SIGTERM, now.Add(killAfter)
	case !e.KillAt.IsZero():
		return 0, time.Time{}
	case now.Before(e.TermAt.Add(killAfter)):
		return 0, e.TermAt.Add(killAfter)
	}
	return liveness.SIGKILL, time.Time{}
}

// nextLook bounds when the wait looks again after a step whose next step
// is due at next: at least a millisecond from now, and at most
// dirwatch.SafetyInterval from now (zero next, no step left, means the
// latter), so that a holder that leaves without a wake-up is still seen.
func nextLook(now, next time.Time) time.Time {
	most := dirwatch.SafetyInterval
	switch {
	case next.IsZero(), next.After(now.Add(most)):
		return now.Add(most)
	case next.Before(now.Add(time.Millisecond)):
		return now.Add(time.Millisecond)
	}
	return next
}
