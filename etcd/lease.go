package etcd

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lease is an etcd lease kept alive by this process, with the process's own
// safe deadline: the time at which the last acknowledged keepalive was sent,
// plus the TTL etcd granted in its answer, minus the safety margin, on the
// clock of now (one that counts a suspend). etcd cannot expire the lease
// before that deadline + margin (it counts the TTL from when it received the
// keepalive, which is later than the send), so a holder that stops at the
// deadline has stopped before anyone else can be admitted, whatever the
// network does.
//
// While it waits (a Campaign standby, a Takeover starter) the lease is
// renewed for as long as etcd keeps it: a deadline that passes there costs
// nothing but a fresh renewal before admission. Once leading, the deadline
// is enforced: valid decides it at each call, and a goroutine of its own,
// apart from the renewals, closes lost when it passes even when nobody asks
// (a keepalive stuck on a frozen member cannot delay it). Session.Done of
// etcd's concurrency package cannot serve: it fires when its keepalive
// stream closes, which can be after the lease expired and a new leader was
// admitted.
//
// Once lost, a lease is never renewed again (a lost holder that kept renewing
// would block every other one forever), and it is not revoked either: only
// Release says the holder's work has stopped.
type lease struct {
	cli    *clientv3.Client
	id     clientv3.LeaseID
	margin time.Duration
	perTry time.Duration // bound of one keepalive, or of one try of a Publish or Release
	heard  *contact
	conns  *members // the package's own connections, for keepalives and Publish
	closed sync.Once

	ctx    context.Context // ends when lost or stopped
	cancel context.CancelFunc

	mu       sync.Mutex
	deadline int64 // own safe deadline, on the clock of now
	granted  time.Duration
	leading  bool          // the deadline is enforced
	why      error         // why lost, once lost
	moved    chan struct{} // the deadline moved or started to count (buffered, 1)
	lost     chan struct{} // closed once lost
	wg       sync.WaitGroup
}

// retryRenew is how soon a failed step that answered at once is retried.
const retryRenew = 100 * time.Millisecond

// tryTimeout is the bound of one keepalive (and one try of a Publish or
// Release): a quarter of the margin, between 150 and 500 ms, so that a
// request stuck on a frozen member is given up in time to be retried,
// several times over, on another one before the deadline.
func tryTimeout(margin time.Duration) time.Duration {
	return min(max(margin/4, 150*time.Millisecond), 500*time.Millisecond)
}

// contact is when etcd last answered this process's calls of one candidacy
// or leadership (zero: never).
type contact struct{ last atomic.Int64 }

func (c *contact) hear() { c.last.Store(now()) }

// silent is how long etcd has not answered; ok is false when it never did.
func (c *contact) silent() (d time.Duration, ok bool) {
	last := c.last.Load()
	if last == 0 {
		return 0, false
	}
	return -until(last), true
}

// grantLease asks etcd for a lease of ttl (whole seconds) and keeps it alive
// until lost or stopped, as a waiter's lease (see lead).
func grantLease(ctx context.Context, cli *clientv3.Client, ttl, margin time.Duration, heard *contact) (*lease, error) {
	sent := now()
	resp, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, err
	}
	heard.hear()
	granted := time.Duration(resp.TTL) * time.Second
	l := &lease{
		cli:      cli,
		id:       resp.ID,
		margin:   margin,
		perTry:   tryTimeout(margin),
		heard:    heard,
		conns:    dialMembers(cli),
		deadline: sent + int64(granted-margin),
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

// lead starts enforcing the deadline: from now on a passed deadline is a
// loss. It reports whether the lease is still valid.
func (l *lease) lead() bool {
	l.mu.Lock()
	l.leading = true
	l.mu.Unlock()
	l.poke()
	return l.valid()
}

// valid reports, at the call, whether the lease holds: not lost, and, once
// leading, before its deadline. A deadline found passed is a loss, here and
// now, whatever the goroutine that watches it has done yet.
func (l *lease) valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.why != nil {
		return false
	}
	if l.leading && now() >= l.deadline {
		l.expireLocked(errDeadline)
		return false
	}
	return true
}

// left is the time before the own deadline (negative when past).
func (l *lease) left() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return until(l.deadline)
}

func (l *lease) poke() {
	select {
	case l.moved <- struct{}{}:
	default:
	}
}

// keepDeadline closes lost when a leader's deadline passes.
func (l *lease) keepDeadline() {
	defer l.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		l.mu.Lock()
		leading, d := l.leading, until(l.deadline)
		l.mu.Unlock()
		if leading && !l.valid() {
			return
		}
		if leading {
			t.Reset(d)
		} else {
			t.Stop()
		}
		select {
		case <-l.ctx.Done():
			return
		case <-l.moved:
		case <-t.C:
		}
	}
}

// renew sends keepalives, a quarter of the safe window after the last
// acknowledged one; each is bounded by perTry, and one that fails is sent
// again at once, to another member (see members), so a frozen member costs
// one try, not the window.
func (l *lease) renew() {
	defer l.wg.Done()
	t := time.NewTimer(l.interval())
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		began := time.Now()
		err := l.keepAlive(l.ctx)
		switch {
		case err == nil:
			t.Reset(l.interval())
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			l.expire(errLeaseGone)
			return
		case time.Since(began) < retryRenew/5:
			t.Reset(retryRenew) // refused at once (no connection): not a busy loop
		default:
			t.Reset(0)
		}
	}
}

// interval is how long after the last acknowledged keepalive the next one
// is sent.
func (l *lease) interval() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max((l.granted-l.margin)/4, 10*time.Millisecond)
}

// keepAlive sends one keepalive, bounded by perTry, and moves the deadline
// on its answer. It asks for an answer from a member that has a raft
// leader, so a member cut off from the others refuses at once.
func (l *lease) keepAlive(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), l.perTry)
	defer cancel()
	p := l.conns.order()[0]
	sent := now()
	resp, err := p.lease.KeepAliveOnce(ctx, l.id)
	l.conns.note(p, err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound))
	if err != nil {
		return err
	}
	l.heard.hear()
	granted := time.Duration(resp.TTL) * time.Second
	l.extend(sent+int64(granted-l.margin), granted)
	return nil
}

// refresh renews at once, up to a few tries within ctx, for a waiter
// about to be admitted.
func (l *lease) refresh(ctx context.Context) error {
	var err error
	for range 3 {
		if err = l.keepAlive(ctx); err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) || ctx.Err() != nil {
			break
		}
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		l.expire(errLeaseGone)
	}
	return err
}

// extend moves the deadline forward to the one an acknowledged keepalive
// gives, unless the lease is lost already.
func (l *lease) extend(deadline int64, granted time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.why != nil || deadline <= l.deadline {
		return
	}
	l.deadline, l.granted = deadline, granted
	l.poke()
}

// expire marks the lease lost for why, once: lost is closed and the
// renewals stop.
func (l *lease) expire(why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked(why)
}

func (l *lease) expireLocked(why error) {
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
	l.closed.Do(l.conns.close)
}

// revoke stops the lease and revokes it, in tries bounded together by one
// TTL (each on the next member); etcd deletes every key attached to it. A
// lease that cannot be revoked (etcd unreachable) expires by itself within
// its TTL.
func (l *lease) revoke() {
	l.stop()
	ctx, cancel := context.WithTimeout(context.Background(), l.ttl())
	defer cancel()
	for ctx.Err() == nil {
		actx, acancel := context.WithTimeout(ctx, max(2*l.perTry, time.Second))
		_, err := l.cli.Revoke(actx, l.id)
		acancel()
		if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) || !transient(err) {
			return
		}
	}
}
