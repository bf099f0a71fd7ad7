package etcd

import (
	"context"
	"time"
)

// hedgeInFlight is how many attempts of one call hedge keeps going at once:
// one per member of a three-member cluster.
const hedgeInFlight = 3

// hedge makes call, and makes it again every `every` while no attempt has
// answered (at most hedgeInFlight at once), and again at once when an
// attempt fails with a transient error: the client's round robin puts each
// new attempt on the next member, so one frozen member, which never
// answers, delays the call by about `every`, not by its whole bound. A
// failure that comes at once is retried at once, then at the next period. The
// first answer that is a success or a refusal is returned; the other
// attempts are cancelled and waited for. call must be safe to repeat.
func hedge[T any](ctx context.Context, every time.Duration, call func(context.Context) (T, error)) (T, error) {
	return hedgeRun(ctx, every,
		func() (*pin, bool) { return nil, true },
		func(ctx context.Context, _ *pin) (T, error) { return call(ctx) },
		nil)
}

// attemptEnd is how one hedged attempt ended, for hedgeRun's ended.
type attemptEnd uint8

const (
	attemptAnswered    attemptEnd = iota // its answer is the call's: a success or a refusal (or any error, once ctx has ended)
	attemptFailed                        // a transient error: another attempt follows
	attemptInterrupted                   // the first to end after ctx ended: its answer is the call's
	attemptCancelled                     // still running when the call returned: cancelled and waited for
)

// hedgeResult is one attempt's outcome: on which pin (nil where the client
// picks), when it started, and what it returned.
type hedgeResult[T any] struct {
	p       *pin
	started time.Time
	v       T
	err     error
}

// hedgeRun is the schedule hedge and hedgeOn share. pick chooses where the
// next attempt goes (false: nowhere free now); call makes it; ended, when
// not nil, hears how each attempt ended, before hedgeRun returns. At most
// hedgeInFlight attempts run at once; a relaunch after a transient failure
// is at once, once per period, so a member that fails at once never makes a
// busy loop.
func hedgeRun[T any](ctx context.Context, every time.Duration, pick func() (*pin, bool), call func(context.Context, *pin) (T, error), ended func(hedgeResult[T], attemptEnd)) (T, error) {
	actx, cancel := context.WithCancel(ctx)
	results := make(chan hedgeResult[T], hedgeInFlight)
	inFlight := 0
	end := func(r hedgeResult[T], how attemptEnd) {
		inFlight--
		if ended != nil {
			ended(r, how)
		}
	}
	launch := func() {
		p, ok := pick()
		if !ok {
			return
		}
		inFlight++
		go func() {
			r := hedgeResult[T]{p: p, started: time.Now()}
			r.v, r.err = call(actx, p)
			results <- r
		}()
	}
	defer func() {
		cancel()
		for inFlight > 0 {
			end(<-results, attemptCancelled)
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	launch()
	var last hedgeResult[T]
	again := true // one relaunch at once after a failure, per period
	for {
		select {
		case r := <-results:
			if r.err == nil || !transient(r.err) || ctx.Err() != nil {
				end(r, attemptAnswered)
				return r.v, r.err
			}
			end(r, attemptFailed)
			last = r
			if inFlight == 0 && again {
				again = false
				launch()
			}
		case <-tick.C:
			again = true
			if inFlight < hedgeInFlight {
				launch()
			}
		case <-ctx.Done():
			if inFlight == 0 {
				return last.v, last.err
			}
			r := <-results // cancelled: the attempts end at once
			end(r, attemptInterrupted)
			return r.v, r.err
		}
	}
}
