package etcd

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lease is an etcd lease kept alive by this process, with the process's own
// safe deadline: the monotonic time at which the last acknowledged keepalive
// was sent, plus the TTL etcd granted in its answer, minus the safety margin.
// etcd cannot expire the lease before that deadline + margin (it counts the
// TTL from when it received the keepalive, which is later than the send), so
// a holder that stops at the deadline has stopped before anyone else can be
// admitted, whatever the network does.
//
// The deadline is kept by a goroutine of its own, apart from the renewals: a
// keepalive stuck in a partition cannot delay it. Session.Done of etcd's
// concurrency package cannot serve: it fires when its keepalive stream
// closes, which can be after the lease expired and a new leader was admitted.
//
// Once lost, a lease is never renewed again (a lost holder that kept renewing
// would block every other one forever).
type lease struct {
	cli    *clientv3.Client
	id     clientv3.LeaseID
	margin time.Duration

	ctx    context.Context // ends when lost or stopped
	cancel context.CancelFunc

	mu       sync.Mutex
	deadline time.Time // own safe deadline, monotonic
	granted  time.Duration
	why      error         // why lost, once lost
	moved    chan struct{} // the deadline moved (buffered, 1)
	lost     chan struct{} // closed once lost
	wg       sync.WaitGroup
}

// retryRenew is how soon a failed keepalive is retried.
const retryRenew = 100 * time.Millisecond

// grantLease asks etcd for a lease of ttl (whole seconds) and keeps it alive
// until lost or stopped.
func grantLease(ctx context.Context, cli *clientv3.Client, ttl, margin time.Duration) (*lease, error) {
	sent := time.Now()
	resp, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, err
	}
	granted := time.Duration(resp.TTL) * time.Second
	l := &lease{
		cli:      cli,
		id:       resp.ID,
		margin:   margin,
		deadline: sent.Add(granted - margin),
		granted:  granted,
		moved:    make(chan struct{}, 1),
		lost:     make(chan struct{}),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(2)
	go l.keepDeadline()
	go l.renew()
	return l, nil
}

// keepDeadline closes lost when the own deadline passes.
func (l *lease) keepDeadline() {
	defer l.wg.Done()
	t := time.NewTimer(time.Until(l.currentDeadline()))
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.moved:
		case <-t.C:
			l.mu.Lock()
			due := !time.Now().Before(l.deadline)
			l.mu.Unlock()
			if due {
				l.expire(errDeadline)
				return
			}
		}
		t.Reset(time.Until(l.currentDeadline()))
	}
}

// renew sends keepalives: a third of the safe window after the last
// acknowledged one, and again soon after a failure, each bounded by the
// deadline (no answer after it can help).
func (l *lease) renew() {
	defer l.wg.Done()
	l.mu.Lock()
	next := time.Now().Add((l.granted - l.margin) / 3)
	l.mu.Unlock()
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithDeadline(l.ctx, l.currentDeadline())
		sent := time.Now()
		resp, err := l.cli.KeepAliveOnce(ctx, l.id)
		cancel()
		switch {
		case err == nil:
			granted := time.Duration(resp.TTL) * time.Second
			l.extend(sent.Add(granted-l.margin), granted)
			t.Reset(time.Until(sent.Add((granted - l.margin) / 3)))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			l.expire(errLeaseGone)
			return
		default:
			t.Reset(retryRenew)
		}
	}
}

func (l *lease) currentDeadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// extend moves the deadline to the one the latest acknowledged keepalive
// gives, unless the lease is lost already.
func (l *lease) extend(deadline time.Time, granted time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.why != nil {
		return
	}
	l.deadline, l.granted = deadline, granted
	select {
	case l.moved <- struct{}{}:
	default:
	}
}

// expire marks the lease lost for why, once: lost is closed and the
// renewals stop.
func (l *lease) expire(why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.why != nil {
		return
	}
	l.why = why
	close(l.lost)
	l.cancel()
}

// cause is why the lease was lost, or nil.
func (l *lease) cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.why
}

// ttl is the TTL etcd granted at the last renewal.
func (l *lease) ttl() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.granted
}

// stop ends the renewals without revoking and waits for the goroutines.
// Marks the lease lost (errReleased) if it was not.
func (l *lease) stop() {
	l.expire(errReleased)
	l.wg.Wait()
}

// revoke stops the lease and revokes it, bounded by one TTL; etcd deletes
// every key attached to it. A lease that cannot be revoked (etcd
// unreachable) expires by itself within its TTL.
func (l *lease) revoke() {
	l.stop()
	ctx, cancel := context.WithTimeout(context.Background(), l.ttl())
	defer cancel()
	_, _ = l.cli.Revoke(ctx, l.id)
}
