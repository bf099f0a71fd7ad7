package gate

import (
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
)

// Unending is a grace that never ends: a holder given it is never
// signalled, and the wait for it ends with the caller's context.
const Unending time.Duration = -1

// Escalate decides the next step against a holder that may be signalled,
// in the attempt a: SIGTERM once grace has passed since its first request,
// SIGKILL once killAfter has passed since the SIGTERM, each once (never a
// SIGTERM when grace is Unending). It returns the signal due now (0 when
// none) and when the next step is due (zero when none is left). It is a
// pure function of its arguments: the caller records a signal it sends in
// a (TermAt, KillAt), so that every starter of the attempt sees it was
// sent.
func Escalate(a Attempt, now time.Time, grace, killAfter time.Duration) (due liveness.Signal, next time.Time) {
	termDue := a.FirstRequestAt.Add(grace)
	switch {
	case a.TermAt.IsZero() && grace == Unending:
		return 0, time.Time{} // no end to the grace: wait for the holder
	case a.TermAt.IsZero() && now.Before(termDue):
		return 0, termDue
	case a.TermAt.IsZero():
		return liveness.SIGTERM, now.Add(killAfter)
	case !a.KillAt.IsZero():
		return 0, time.Time{}
	case now.Before(a.TermAt.Add(killAfter)):
		return 0, a.TermAt.Add(killAfter)
	}
	return liveness.SIGKILL, time.Time{}
}

// Clamp bounds when the next look is due: at least a millisecond from now,
// and at most most from now (zero next means most), so that a holder that
// leaves without a wake-up is still seen.
func Clamp(now, next time.Time, most time.Duration) time.Time {
	switch {
	case next.IsZero(), next.After(now.Add(most)):
		return now.Add(most)
	case next.Before(now.Add(time.Millisecond)):
		return now.Add(time.Millisecond)
	}
	return next
}
