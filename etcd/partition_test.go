//go:build linux

package etcd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// partitionTrials is how many times TestPartition cuts a leader off.
const partitionTrials = 3

// TestPartition cuts the leader off from etcd through a proxy that holds
// every byte (as a partition does, then delivers them late). The leader's
// Lost must come before the standby's admission by at least SafetyMargin/2,
// and the fenced writes it sent while cut off, delivered after the heal,
// must all be rejected.
func TestPartition(t *testing.T) {
	s := startEtcd(t)
	cli := client(t, s.addr)
	o, err := Options{TTL: testTTL}.resolve()
	require.NoError(t, err)
	var leads []time.Duration
	for trial := 1; trial <= partitionTrials; trial++ {
		key := fmt.Sprintf("/part/%d", trial)
		lead, stale := partitionTrial(t, s, cli, key)
		leads = append(leads, lead)
		assert.GreaterOrEqual(t, lead, o.SafetyMargin/2, "trial %d: Lost before the next admission by at least SafetyMargin/2", trial)
		assert.Positive(t, stale, "trial %d: the cut-off leader's late fenced writes were tried", trial)
	}
	t.Logf("partition figures: Lost ahead of the next admission by %v (SafetyMargin %v, TTL %v)", leads, o.SafetyMargin, o.TTL)
}

// partitionTrial runs one cut and returns by how much Lost came before the
// next admission, and how many late fenced writes were rejected.
func partitionTrial(t testing.TB, s *server, cli *clientv3.Client, key string) (time.Duration, int) {
	t.Helper()
	p := startProxy(t, s.addr)
	a := startRunner(t, spec{Endpoint: p.addr(), Key: key, How: "campaign", Witness: 20 * time.Millisecond, Linger: 200 * time.Millisecond})
	first := a.next("admitted")
	b := startRunner(t, spec{Endpoint: s.addr, Key: key, How: "campaign"})
	waitStatus(t, cli, key, func(r Report) bool { return len(r.Standby) == 1 })
	for w := a.next("write"); !w.OK; w = a.next("write") {
	}
	p.cut()
	cut := mono()
	lost := a.next("lost")
	second := b.next("admitted")
	p.heal()
	a.next("released") // after every write it sent has been answered
	require.Greater(t, second.Token, first.Token)

	var lateRejected, lateAccepted int
	for _, e := range a.all() {
		if e.Ev == "write" && e.Rev > cut { // sent after the cut
			if e.OK {
				lateAccepted++
			} else if e.Err == "" {
				lateRejected++
			}
		}
	}
	accepted, stale := verifyWitness(t, cli, key)
	assert.Zero(t, stale, "no stale fenced write was accepted")
	assert.Positive(t, accepted)
	// A write sent just after the cut may have been in etcd's hands before
	// the lease expired (legitimately, as the key was still the leader's);
	// the history check above is the proof that none was stale.
	t.Logf("%s: cut-off leader lost %v after the cut; standby admitted %v after that; late writes rejected %d, accepted while still leader %d",
		key, time.Duration(lost.Mono-cut), time.Duration(second.Mono-lost.Mono), lateRejected, lateAccepted)
	a.stop()
	b.stop()
	p.close()
	return time.Duration(second.Mono - lost.Mono), lateRejected
}

// verifyWitness reads the whole history of key's witness writes and checks
// each accepted one against etcd's own record of the leader key at that
// revision: the write's token must be the leader key's create revision then.
// It returns how many writes were accepted, and how many of those were stale.
func verifyWitness(t testing.TB, cli *clientv3.Client, key string) (accepted, stale int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	wkey := key + "/witness"
	cur, err := cli.Get(ctx, wkey)
	require.NoError(t, err)
	if len(cur.Kvs) == 0 {
		return 0, 0
	}
	last := cur.Kvs[0].ModRevision
	for wr := range cli.Watch(ctx, wkey, clientv3.WithRev(1)) {
		require.NoError(t, wr.Err())
		for _, ev := range wr.Events {
			token, err := strconv.ParseInt(strings.Fields(string(ev.Kv.Value))[0], 10, 64)
			require.NoError(t, err)
			at, err := cli.Get(ctx, key, clientv3.WithRev(ev.Kv.ModRevision))
			require.NoError(t, err)
			accepted++
			if len(at.Kvs) == 0 || at.Kvs[0].CreateRevision != token {
				stale++
				t.Errorf("stale fenced write %q accepted at revision %d (leader then: %v)", ev.Kv.Value, ev.Kv.ModRevision, at.Kvs)
			}
			if ev.Kv.ModRevision >= last {
				return accepted, stale
			}
		}
	}
	t.Fatal("the witness history ended early")
	return
}
