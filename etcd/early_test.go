package etcd

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bootAt is when l was admitted, on the clock of now.
func bootAt(l *Leadership) int64 { return now() - int64(time.Since(l.admittedAt)) }

// finalDeadline is l's safe deadline, on the clock of now.
func finalDeadline(l *Leadership) int64 {
	l.ls.mu.Lock()
	defer l.ls.mu.Unlock()
	return l.ls.deadline
}

// TestEarlyRevokeMakesTheNextWaitATTL revokes a live leader's lease behind
// its back, as a stale raft leader of an etcd older than 3.5.13 (or one
// resumed from SIGSTOP) does: the standby must not be admitted before the
// old leader's own deadline + SafetyMargin, and says why it waits. A
// Release, by contrast, lets the next standby in at once.
func TestEarlyRevokeMakesTheNextWaitATTL(t *testing.T) {
	cli, ctx := setup(t)
	o, err := quiet().resolve()
	require.NoError(t, err)
	a := leading(t, ctx, cli, "/early")

	log := &records{}
	ob := quiet()
	ob.Logger = slog.New(log)
	type result struct {
		l   *Leadership
		err error
	}
	campaign := func(o Options) chan result {
		ch := make(chan result, 1)
		go func() {
			l, err := Campaign(ctx, cli, "/early", o)
			ch <- result{l, err}
		}()
		return ch
	}
	bch := campaign(ob)
	log.await(t, "following the leader's lease")
	_, err = cli.Revoke(ctx, a.Lease()) // etcd's own early revoke
	require.NoError(t, err)
	b := <-bch
	require.NoError(t, b.err)
	defer b.l.Release()
	<-a.Lost()
	gap := time.Duration(bootAt(b.l) - finalDeadline(a))
	assert.GreaterOrEqual(t, gap, o.SafetyMargin, "admitted after the revoked leader's deadline + SafetyMargin")
	log.await(t, "revoked before its time")

	logC := &records{}
	oc := quiet()
	oc.Logger = slog.New(logC)
	cch := campaign(oc)
	logC.await(t, "following the leader's lease")
	b.l.Release()
	c := <-cch
	require.NoError(t, c.err)
	defer c.l.Release()
	assert.Less(t, bootAt(c.l), finalDeadline(b.l)+int64(o.SafetyMargin), "after a Release the next is admitted at once, not a TTL later")
	assert.NotContains(t, logC.all(), "revoked before its time")
	t.Logf("after an early revoke: admitted %v after the old leader's deadline (SafetyMargin %v)", gap, o.SafetyMargin)
}
