package etcd

import (
	"context"
	"testing"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestNoLeaksAfterReleaseAndClose runs every call of the package, in
// process, then releases, closes the clients and stops etcd: not one
// goroutine may be left, with no ignores. (TestMain checks the same after
// all the tests.)
func TestNoLeaksAfterReleaseAndClose(t *testing.T) {
	s := startEtcd(t)
	a, err := newClient(s.addr)
	require.NoError(t, err)
	b, err := newClient(s.addr)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	changes := Observe(ctx, b, "/leak")
	o := quiet()
	o.Dir = t.TempDir()
	first, err := Campaign(ctx, a, "/leak", o)
	require.NoError(t, err)
	require.NoError(t, first.Publish(ctx, runnerstate.Record{Specs: []string{"x"}}))
	go func() {
		for range first.Restart() {
			first.Release()
		}
	}()
	o.Dir = t.TempDir() // the other "machine"'s
	second, err := Takeover(ctx, b, "/leak", o)
	require.NoError(t, err)
	_, err = Status(ctx, b, "/leak")
	require.NoError(t, err)
	require.NoError(t, RequestRestart(ctx, a, "/leak", runnerstate.RestartDrain))
	_, _, err = Running(ctx, a, "/leak")
	require.NoError(t, err)
	received(t, second.Restart())
	second.Release()
	first.Release()
	cancel()
	for range changes {
	}

	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	s.stop()
	goleak.VerifyNone(t)
}
