package etcd

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// quiet is Options for in-process tests: the test TTL and no logging.
func quiet() Options {
	return Options{TTL: testTTL, Logger: slog.New(slog.DiscardHandler)}
}

// setup starts an etcd for the test and connects to it; the context is
// bounded by wait.
func setup(t *testing.T) (*clientv3.Client, context.Context) {
	t.Helper()
	s := startEtcd(t)
	return client(t, s.addr), ctxT(t)
}

// leading campaigns for key with quiet options, failing the test if it is
// not admitted; the leadership is released when the test ends.
func leading(t *testing.T, ctx context.Context, cli *clientv3.Client, key string) *Leadership {
	t.Helper()
	l, err := Campaign(ctx, cli, key, quiet())
	require.NoError(t, err)
	t.Cleanup(l.Release)
	return l
}

// received waits for a value on ch, failing the test after wait.
func received[T any](t *testing.T, ch <-chan T) (T, bool) {
	t.Helper()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-time.After(wait):
		t.Fatal("nothing received within", wait)
	}
	var zero T
	return zero, false
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestOptionsDefaultsAndRounding(t *testing.T) {
	for _, tc := range []struct {
		ttl, want, margin time.Duration
	}{
		{0, 10 * time.Second, 2 * time.Second},
		{time.Second, 2 * time.Second, 400 * time.Millisecond},
		{2500 * time.Millisecond, 3 * time.Second, 600 * time.Millisecond},
		{10 * time.Second, 10 * time.Second, 2 * time.Second},
	} {
		o, err := Options{TTL: tc.ttl}.resolve()
		require.NoError(t, err)
		assert.Equal(t, tc.want, o.TTL, "TTL %v", tc.ttl)
		assert.Equal(t, tc.margin, o.SafetyMargin, "margin for TTL %v", tc.ttl)
		assert.Equal(t, runnerstate.RestartNow, o.Mode)
		assert.Equal(t, DefaultGrace, o.Grace)
		assert.Equal(t, DefaultKillAfter, o.KillAfter)
	}
	_, err := Options{TTL: 2 * time.Second, SafetyMargin: time.Second}.resolve()
	assert.ErrorContains(t, err, "SafetyMargin")
}

func TestBadInput(t *testing.T) {
	cli, ctx := setup(t)
	o := quiet()
	o.Mode = "later"
	_, err := Takeover(ctx, cli, "/bad", o)
	assert.ErrorIs(t, err, runnerstate.ErrBadMode)
	_, err = Campaign(ctx, cli, "/bad", o)
	assert.ErrorIs(t, err, runnerstate.ErrBadMode)
	assert.ErrorIs(t, RequestRestart(ctx, cli, "/bad", "later"), runnerstate.ErrBadMode)
	for _, key := range []string{"", "/ends/with/"} {
		_, err = Campaign(ctx, cli, key, quiet())
		assert.ErrorContains(t, err, "runnerstate/etcd: key")
		_, err = Status(ctx, cli, key)
		assert.Error(t, err)
	}
}

func TestCampaignPublishRelease(t *testing.T) {
	cli, ctx := setup(t)
	o := quiet()
	o.Record = runnerstate.Record{Specs: []string{"a"}, Meta: json.RawMessage(`{"zone":"x"}`)}
	l, err := Campaign(ctx, cli, "/app", o)
	require.NoError(t, err)
	assert.Greater(t, l.Token(), int64(0))

	h, ok, err := Running(ctx, cli, "/app")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, l.Token(), h.Token)
	assert.Equal(t, int64(l.Lease()), h.Lease)
	assert.Equal(t, runnerstate.Self(), h.Record.Process, "the record names this process")
	assert.Equal(t, []string{"a"}, h.Record.Specs)
	assert.False(t, h.Record.StartedAt.IsZero())

	require.NoError(t, l.Publish(ctx, runnerstate.Record{Specs: []string{"b"}}))
	h, _, err = Running(ctx, cli, "/app")
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, h.Record.Specs)
	assert.Equal(t, l.Token(), h.Token, "a Publish keeps the token")

	// A fenced write works while leading.
	resp, err := cli.Txn(ctx).If(l.Fence()).Then(clientv3.OpPut("/other-data", "1")).Commit()
	require.NoError(t, err)
	assert.True(t, resp.Succeeded)

	assert.False(t, closed(l.Lost()))
	require.NoError(t, l.Context().Err())
	l.Release()
	l.Release() // idempotent
	assert.True(t, closed(l.Lost()))
	assert.Error(t, l.Context().Err())
	_, ok = <-l.Restart()
	assert.False(t, ok, "Restart is closed at Lost")
	assert.ErrorIs(t, l.Publish(ctx, runnerstate.Record{}), runnerstate.ErrNotHolder)
	resp, err = cli.Txn(ctx).If(l.Fence()).Then(clientv3.OpPut("/other-data", "2")).Commit()
	require.NoError(t, err)
	assert.False(t, resp.Succeeded, "a released leader's fenced write is rejected")

	_, ok, err = Running(ctx, cli, "/app")
	require.NoError(t, err)
	assert.False(t, ok, "Release deletes the key")
	r, err := cli.Get(ctx, "/app", clientv3.WithPrefix())
	require.NoError(t, err)
	assert.Empty(t, r.Kvs, "nothing is left under the key")
}

func TestLostWhenKeyDeletedOrLeaseRevoked(t *testing.T) {
	cli, ctx := setup(t)

	l := leading(t, ctx, cli, "/del")
	_, err := cli.Delete(ctx, "/del")
	require.NoError(t, err)
	received(t, l.Lost())
	assert.ErrorContains(t, l.Err(), "deleted or replaced")
	assert.ErrorIs(t, l.Publish(ctx, runnerstate.Record{}), runnerstate.ErrNotHolder)

	l2 := leading(t, ctx, cli, "/rev")
	_, err = cli.Revoke(ctx, l2.Lease())
	require.NoError(t, err)
	received(t, l2.Lost())
	_, ok := <-l2.Restart()
	assert.False(t, ok)
}

func TestPublishNeverOverwritesAnotherLeader(t *testing.T) {
	cli, ctx := setup(t)
	l := leading(t, ctx, cli, "/pub")
	// Another leader's key replaces this one behind its back (what a
	// partitioned leader's successor looks like to it).
	lease, err := cli.Grant(ctx, 10)
	require.NoError(t, err)
	_, err = cli.Delete(ctx, "/pub")
	require.NoError(t, err)
	_, err = cli.Put(ctx, "/pub", `{"pid":1}`, clientv3.WithLease(lease.ID))
	require.NoError(t, err)
	err = l.Publish(ctx, runnerstate.Record{Specs: []string{"stale"}})
	assert.ErrorIs(t, err, runnerstate.ErrNotHolder)
	h, _, err := Running(ctx, cli, "/pub")
	require.NoError(t, err)
	assert.Equal(t, 1, h.Record.PID, "the other leader's record stands")
	_, _ = cli.Revoke(ctx, lease.ID)
}

func TestRequestRestart(t *testing.T) {
	cli, ctx := setup(t)

	// No leader: nil, and nothing kept for a later one.
	require.NoError(t, RequestRestart(ctx, cli, "/rr", runnerstate.RestartNow))
	l := leading(t, ctx, cli, "/rr")
	r, err := Status(ctx, cli, "/rr")
	require.NoError(t, err)
	assert.Equal(t, "", r.Restart)

	require.NoError(t, RequestRestart(ctx, cli, "/rr", runnerstate.RestartDrain))
	mode, ok := received(t, l.Restart())
	require.True(t, ok)
	assert.Equal(t, runnerstate.RestartDrain, mode)
	r, err = Status(ctx, cli, "/rr")
	require.NoError(t, err)
	assert.Equal(t, runnerstate.RestartDrain, r.Restart)

	// "now" upgrades "drain"; "drain" never weakens "now".
	require.NoError(t, RequestRestart(ctx, cli, "/rr", runnerstate.RestartNow))
	mode, _ = received(t, l.Restart())
	assert.Equal(t, runnerstate.RestartNow, mode)
	require.NoError(t, RequestRestart(ctx, cli, "/rr", runnerstate.RestartDrain))
	r, err = Status(ctx, cli, "/rr")
	require.NoError(t, err)
	assert.Equal(t, runnerstate.RestartNow, r.Restart)
	first, again := l.Restart(), l.Restart()
	assert.True(t, first == again, "the same channel on every call")
	select {
	case m := <-l.Restart():
		t.Fatalf("a weaker request was delivered: %q", m)
	default:
	}

	// The request goes with its leader.
	l.Release()
	leading(t, ctx, cli, "/rr")
	r, err = Status(ctx, cli, "/rr")
	require.NoError(t, err)
	assert.Equal(t, "", r.Restart)
}

func TestStatusJSON(t *testing.T) {
	cli, ctx := setup(t)
	r, err := Status(ctx, cli, "/js")
	require.NoError(t, err)
	data, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	assert.Equal(t, "/js", m["key"])
	assert.Equal(t, false, m["held"])
	assert.NotContains(t, m, "holder", "no holder is omitted, not printed as zeros")
	assert.Equal(t, []any{}, m["waiting"])
	assert.Equal(t, []any{}, m["standby"])
	assert.Equal(t, "", m["restart"])
	assert.Greater(t, m["revision"], float64(0))

	l := leading(t, ctx, cli, "/js")
	r, err = Status(ctx, cli, "/js")
	require.NoError(t, err)
	data, err = json.Marshal(r)
	require.NoError(t, err)
	m = nil
	require.NoError(t, json.Unmarshal(data, &m))
	holder := m["holder"].(map[string]any)
	assert.Equal(t, float64(l.Token()), holder["token"])
	assert.Equal(t, float64(l.Lease()), holder["lease"])
	assert.Contains(t, holder["record"], "process")
}

func TestObserve(t *testing.T) {
	cli, ctx := setup(t)
	ctx, cancel := context.WithCancel(ctx)
	ch := Observe(ctx, cli, "/obs")
	h, _ := received(t, ch)
	assert.Equal(t, Holder{}, h, "none first")

	l, err := Campaign(ctx, cli, "/obs", quiet())
	require.NoError(t, err)
	h, _ = received(t, ch)
	assert.Equal(t, l.Token(), h.Token, "the new leader")
	require.NoError(t, l.Publish(ctx, runnerstate.Record{Specs: []string{"x"}}))
	h, _ = received(t, ch)
	assert.Equal(t, []string{"x"}, h.Record.Specs, "the Publish")
	l.Release()
	h, _ = received(t, ch)
	assert.Equal(t, Holder{}, h, "none again")

	// A second observer starts with the current state.
	l2, err := Campaign(ctx, cli, "/obs", quiet())
	require.NoError(t, err)
	h, _ = received(t, ch)
	assert.Equal(t, l2.Token(), h.Token)
	assert.Greater(t, l2.Token(), l.Token())
	ch2 := Observe(ctx, cli, "/obs")
	h, _ = received(t, ch2)
	assert.Equal(t, l2.Token(), h.Token)
	l2.Release()
	cancel()
	for range ch {
	}
	for range ch2 {
	}
}

func TestBusyErrorWhenContextEnds(t *testing.T) {
	cli, ctx := setup(t)
	l := leading(t, ctx, cli, "/busy")

	for _, how := range []string{"campaign", "takeover"} {
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		o := quiet()
		o.NoForce = true
		var err error
		if how == "campaign" {
			_, err = Campaign(short, cli, "/busy", o)
		} else {
			_, err = Takeover(short, cli, "/busy", o)
		}
		cancel()
		var be *BusyError
		require.ErrorAs(t, err, &be, how)
		assert.Equal(t, "/busy", be.Key)
		assert.Equal(t, l.Token(), be.Holder.Token)
		assert.ErrorIs(t, err, runnerstate.ErrBusy)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "/busy")
	}
	// The starters withdrew: no mark, and the takeover's request is gone
	// (no other starter waits).
	r, err := Status(ctx, cli, "/busy")
	require.NoError(t, err)
	assert.Empty(t, r.Waiting)
	assert.Empty(t, r.Standby)
	assert.Equal(t, "", r.Restart, "the starter took its request back")
	assert.Equal(t, l.Token(), r.Holder.Token)
}

// With Dir, the record written at admission is not ready, in the
// directory and on the key: a runnerstate.Start waits for the leader's own
// Publish, which makes both ready.
func TestDirRecordReadyOnlyAfterPublish(t *testing.T) {
	cli, ctx := setup(t)
	dir := t.TempDir()
	o := quiet()
	o.Dir = dir
	o.Record = runnerstate.Record{Specs: []string{"dir"}}
	l, err := Takeover(ctx, cli, "/ready", o)
	require.NoError(t, err)
	defer l.Release()
	rec, running, err := runnerstate.Running(dir)
	require.NoError(t, err)
	require.True(t, running)
	assert.Equal(t, []string{"dir"}, rec.Specs)
	assert.False(t, rec.Ready, "admitted, not yet published by the leader")

	require.NoError(t, l.Publish(ctx, runnerstate.Record{Specs: []string{"dir"}}))
	rec, _, err = runnerstate.Running(dir)
	require.NoError(t, err)
	assert.True(t, rec.Ready)
	h, ok, err := Running(ctx, cli, "/ready")
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, h.Record.Ready, "the key's record too")
}

func TestDirLocalFirstReleaseInReverse(t *testing.T) {
	cli, ctx := setup(t)
	dir := t.TempDir()
	o := quiet()
	o.Dir = dir
	o.Record = runnerstate.Record{Specs: []string{"dir"}}
	l, err := Takeover(ctx, cli, "/dir", o)
	require.NoError(t, err)
	rec, running, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.True(t, running, "the local lock is held")
	assert.Equal(t, []string{"dir"}, rec.Specs, "the record is published locally too")

	// A Campaign with the same dir waits for the local runner first.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = Campaign(short, cli, "/dir", o)
	cancel()
	assert.ErrorIs(t, err, runnerstate.ErrBusy)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	// A local restart request reaches the leadership.
	require.NoError(t, runnerstate.RequestRestart(dir, runnerstate.RestartDrain))
	mode, _ := received(t, l.Restart())
	assert.Equal(t, runnerstate.RestartDrain, mode)

	l.Release()
	_, running, err = runnerstate.Running(dir)
	require.NoError(t, err)
	assert.False(t, running)
	_, held, err := Running(ctx, cli, "/dir")
	require.NoError(t, err)
	assert.False(t, held)

	l2, err := Campaign(ctx, cli, "/dir", o)
	require.NoError(t, err)
	_, running, _ = runnerstate.Running(dir)
	assert.True(t, running)
	l2.Release()
}
