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
	actx, cancel := context.WithCancel(ctx)
	type result struct {
		v   T
		err error
	}
	results := make(chan result, hedgeInFlight)
	inFlight := 0
	launch := func() {
		inFlight++
		go func() {
			v, err := call(actx)
			results <- result{v, err}
		}()
	}
	defer func() {
		cancel()
		for ; inFlight > 0; inFlight-- {
			<-results
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	launch()
	var last result
	again := true // one relaunch at once after a failure, per period: never a busy loop
	for {
		select {
		case r := <-results:
			inFlight--
			if r.err == nil || !transient(r.err) || ctx.Err() != nil {
				return r.v, r.err
			}
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
			inFlight--
			return r.v, r.err
		}
	}
}
