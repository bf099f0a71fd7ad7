package etcd

import (
	"context"
	"time"
)

// hedgeInFlight is how many tries of one call hedge keeps going at once:
// one per member of a three-member cluster.
const hedgeInFlight = 3

// hedge makes call, and makes it again every `every` while no try has
// answered (at most hedgeInFlight at once), and again at once when a
// try fails with a transient error: the client's round robin puts each
// new try on the next member, so one frozen member, which never
// answers, delays the call by about `every`, not by its whole bound. A
// failure that comes at once is retried at once, then at the next period. The
// first answer that is a success or a refusal is returned; the other
// tries are cancelled and waited for. call must be safe to repeat.
func hedge[T any](ctx context.Context, every time.Duration, call func(context.Context) (T, error)) (T, error) {
	return hedgeRun(ctx, every,
		func() (*memberConn, bool) { return nil, true },
		func(ctx context.Context, _ *memberConn) (T, error) { return call(ctx) },
		nil)
}

// tryEnd is how one hedged try ended, for hedgeRun's ended.
type tryEnd uint8

const (
	tryAnswered    tryEnd = iota // its answer is the call's: a success or a refusal (or any error, once ctx has ended)
	tryFailed                    // a transient error: another try follows
	tryInterrupted               // the first to end after ctx ended: its answer is the call's
	tryCancelled                 // still running when the call returned: cancelled and waited for
)

// hedgeResult is one try's outcome: on which member's connection (nil where the client
// picks), when it started, and what it returned.
type hedgeResult[T any] struct {
	p       *memberConn
	started time.Time
	v       T
	err     error
}

// hedgeRun is the schedule hedge and hedgeOn share. pick chooses where the
// next try goes (false: nowhere free now); call makes it; ended, when
// not nil, hears how each try ended, before hedgeRun returns. At most
// hedgeInFlight tries run at once; a relaunch after a transient failure
// is at once, once per period, so a member that fails at once never makes a
// busy loop.
func hedgeRun[T any](ctx context.Context, every time.Duration, pick func() (*memberConn, bool), call func(context.Context, *memberConn) (T, error), ended func(hedgeResult[T], tryEnd)) (T, error) {
	actx, cancel := context.WithCancel(ctx)
	results := make(chan hedgeResult[T], hedgeInFlight)
	inFlight := 0
	end := func(r hedgeResult[T], how tryEnd) {
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
			end(<-results, tryCancelled)
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
				end(r, tryAnswered)
				return r.v, r.err
			}
			end(r, tryFailed)
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
			r := <-results // cancelled: the tries end at once
			end(r, tryInterrupted)
			return r.v, r.err
		}
	}
}
