package etcd

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// silentListener accepts connections and never answers, as a frozen host
// or a wrong port behind a firewall that accepts does.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// records is a slog handler that keeps the messages.
type records struct {
	mu      sync.Mutex
	msgs    []string
	changed chan struct{} // closed and replaced at each message
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	if r.changed != nil {
		close(r.changed)
	}
	r.changed = make(chan struct{})
	return nil
}

// await waits, bounded by wait, for a message containing s.
func (r *records) await(t *testing.T, s string) {
	t.Helper()
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		changed, all := r.changed, strings.Join(r.msgs, "\n")
		r.mu.Unlock()
		if strings.Contains(all, s) {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("no log message %q within %v: %s", s, wait, all)
		}
	}
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }
func (r *records) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "\n")
}

// TestUnreachableEtcdIsNotBusy points every call at endpoints where no etcd
// answers (nothing listening; a port that accepts and never answers): the
// error names the endpoints, says etcd could not be reached, and is not
// runnerstate.ErrBusy; Campaign and Takeover warn while they wait.
func TestUnreachableEtcdIsNotBusy(t *testing.T) {
	eps := []string{"127.0.0.1:1", silentListener(t)}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer func() { _ = cli.Close() }()
	check := func(what string, err error) {
		t.Helper()
		require.Error(t, err, what)
		assert.NotErrorIs(t, err, runnerstate.ErrBusy, what)
		assert.ErrorIs(t, err, context.DeadlineExceeded, what)
		assert.Contains(t, err.Error(), "etcd could not be reached", what)
		for _, ep := range eps {
			assert.Contains(t, err.Error(), ep, what)
		}
		assert.True(t, strings.HasPrefix(err.Error(), "runnerstate/etcd: key /unreachable"), "%s: %v", what, err)
	}
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 300*time.Millisecond)
	}

	ctx, cancel := short()
	_, _, err = Running(ctx, cli, "/unreachable")
	cancel()
	check("Running", err)
	ctx, cancel = short()
	_, err = Status(ctx, cli, "/unreachable")
	cancel()
	check("Status", err)
	ctx, cancel = short()
	err = RequestRestart(ctx, cli, "/unreachable", runnerstate.RestartNow)
	cancel()
	check("RequestRestart", err)

	o := quiet()
	log := &records{}
	o.Logger = slog.New(log)
	ctx, cancel = short()
	_, err = Takeover(ctx, cli, "/unreachable", o)
	cancel()
	check("Takeover", err)
	// Campaign warns once no member has answered for unreachableAfter; the
	// campaign is ended once the warning came (a loaded machine may take
	// longer than unreachableAfter to log it: the wait is bounded by wait).
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Campaign(ctx, cli, "/unreachable", o)
		done <- err
	}()
	log.await(t, "no etcd member has answered")
	cancel()
	err = <-done
	require.Error(t, err, "Campaign")
	assert.NotErrorIs(t, err, runnerstate.ErrBusy, "Campaign")
	assert.ErrorIs(t, err, context.Canceled, "Campaign")
	assert.Contains(t, err.Error(), "etcd could not be reached", "Campaign")
	assert.Contains(t, log.all(), "TTL under the default")
}

func TestOlderVersion(t *testing.T) {
	assert.True(t, older("3.4.23", minEtcdVersion))
	assert.True(t, older("3.5.12", minEtcdVersion))
	assert.False(t, older("3.5.13", minEtcdVersion))
	assert.False(t, older("3.7.3", minEtcdVersion))
	assert.False(t, older("3.6.0-rc.1", minEtcdVersion))
	assert.False(t, older("junk", minEtcdVersion))
}
