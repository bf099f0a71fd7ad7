//go:build linux

package etcd

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The figures of DESIGN's targets, against an etcd in this process with the
// other side a real process. Run:
//
//	go test -run '^$' -bench 'Txn|CooperativeTakeover' -benchtime 50x
//	go test -run '^$' -bench 'Failover|Partition' -benchtime 5x
//
// Cooperative takeovers are reported as p50/p90 in ms and as a ratio to the floor: one
// bare etcd Txn (a compare and a put, the shape of a fenced write) measured
// in the same run. A failover's floor is the TTL (nobody can be admitted
// before the dead leader's lease expires), so it is reported against it.

// BenchmarkTxnRoundTrip is the floor: one fenced-write-shaped Txn.
func BenchmarkTxnRoundTrip(b *testing.B) {
	s := startEtcd(b)
	cli := client(b, s.addr)
	ctx := ctxT(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision("/floor"), "=", 0)).
			Then(clientv3.OpPut("/floor-data", "x")).Commit()
		require.NoError(b, err)
	}
}

// txnFloor is the median of n bare Txn round trips.
func txnFloor(b *testing.B, cli *clientv3.Client, n int) time.Duration {
	ctx := ctxT(b)
	var ds []time.Duration
	for range n {
		start := time.Now()
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision("/floor"), "=", 0)).
			Then(clientv3.OpPut("/floor-data", "x")).Commit()
		require.NoError(b, err)
		ds = append(ds, time.Since(start))
	}
	return percentile(ds, 50)
}

func percentile(ds []time.Duration, p int) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkCooperativeTakeover is a cooperative takeover: a Takeover call to its return,
// the leader being another process that steps down when asked.
func BenchmarkCooperativeTakeover(b *testing.B) { benchCooperativeTakeover(b, false) }

// BenchmarkCooperativeTakeoverDir is the same with Options.Dir on both sides, one dir
// (the leader on the same machine): the local lock is taken over first
// (runnerstate.Takeover), then the cluster.
func BenchmarkCooperativeTakeoverDir(b *testing.B) { benchCooperativeTakeover(b, true) }

func benchCooperativeTakeover(b *testing.B, withDir bool) {
	s := startEtcd(b)
	cli := client(b, s.addr)
	o := Options{TTL: testTTL, Grace: time.Hour, KillAfter: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	if withDir {
		o.Dir = b.TempDir()
	}
	// Without Dir one leader process steps down and campaigns again each
	// time. With Dir the leader must exit: the core's Takeover waits for the
	// previous runner's process to be gone, so each round has a fresh one.
	leaderSpec := spec{Endpoint: s.addr, Key: "/bench", How: "campaign", Obey: true, Loop: !withDir, Dir: o.Dir}
	leader := startRunner(b, leaderSpec)
	floor := txnFloor(b, cli, 50)
	ctx := ctxT(b)
	var ds []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if withDir && i > 0 {
			leader.stop()
			leader = startRunner(b, leaderSpec)
		}
		leader.next("admitted")
		b.StartTimer()
		start := time.Now()
		l, err := Takeover(ctx, cli, "/bench", o)
		ds = append(ds, time.Since(start))
		require.NoError(b, err)
		b.StopTimer()
		l.Release() // the leader process campaigns again, or a new one does
		b.StartTimer()
	}
	b.StopTimer()
	p50 := percentile(ds, 50)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(percentile(ds, 90)), "p90-ms")
	b.ReportMetric(float64(p50)/float64(floor), "x-txn")
	b.ReportMetric(ms(floor), "txn-ms")
	leader.stop()
}

// BenchmarkFailoverKill9 is a failover: kill -9 of the leader process to the
// return of a standby's Campaign. Its floor is the TTL.
func BenchmarkFailoverKill9(b *testing.B) {
	s := startEtcd(b)
	cli := client(b, s.addr)
	o := Options{TTL: testTTL, Logger: slog.New(slog.DiscardHandler)}
	var ds []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		leader := startRunner(b, spec{Endpoint: s.addr, Key: "/failover", How: "campaign"})
		leader.next("admitted")
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		type result struct {
			l   *Leadership
			err error
			at  time.Time
		}
		done := make(chan result, 1)
		go func() {
			l, err := Campaign(ctx, cli, "/failover", o)
			done <- result{l, err, time.Now()}
		}()
		waitStatus(b, cli, "/failover", func(r Report) bool { return len(r.Standby) == 1 })
		b.StartTimer()
		killed := time.Now()
		leader.kill9()
		r := <-done
		b.StopTimer()
		require.NoError(b, r.err)
		ds = append(ds, r.at.Sub(killed))
		r.l.Release()
		cancel()
		b.StartTimer()
	}
	b.StopTimer()
	p50 := percentile(ds, 50)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(slices.Max(ds)), "max-ms")
	b.ReportMetric(float64(p50)/float64(testTTL), "x-ttl")
	b.ReportMetric(ms(slices.Max(ds)-testTTL), "max-over-ttl-ms")
}

// BenchmarkPartition cuts the leader off, b.N times: the figure is by how
// much its Lost came before the standby's admission, at the least (the
// target is at least SafetyMargin/2).
func BenchmarkPartition(b *testing.B) {
	s := startEtcd(b)
	cli := client(b, s.addr)
	o, err := Options{TTL: testTTL}.resolve()
	require.NoError(b, err)
	var leads []time.Duration
	for i := range b.N {
		lead, _ := partitionTrial(b, s, cli, "/bench-part/"+strconv.Itoa(i))
		leads = append(leads, lead)
	}
	b.ReportMetric(ms(slices.Min(leads)), "min-lead-ms")
	b.ReportMetric(ms(o.SafetyMargin), "margin-ms")
	b.ReportMetric(float64(slices.Min(leads))/float64(o.SafetyMargin), "x-margin")
}
