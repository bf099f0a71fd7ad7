package etcd

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestHedgeRoutesAroundAStuckTry: a try that never answers (as on
// a frozen member) does not hold the call; the stuck one is cancelled and
// waited for before hedge returns.
func TestHedgeRoutesAroundAStuckTry(t *testing.T) {
	var calls, ended atomic.Int32
	v, err := hedge(ctxT(t), readHedge/30, func(ctx context.Context) (string, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done() // stuck until cancelled
			ended.Add(1)
			return "", ctx.Err()
		}
		return "ok", nil
	})
	require.NoError(t, err)
	assert.Equal(t, "ok", v)
	assert.Equal(t, int32(1), ended.Load(), "the stuck try ended before hedge returned")
}

func TestHedgeRetriesTransientAndStopsAtRefusal(t *testing.T) {
	var calls atomic.Int32
	refused := errors.New("refused")
	_, err := hedge(ctxT(t), readHedge, func(context.Context) (int, error) {
		if calls.Add(1) == 1 {
			return 0, status.Error(codes.Unavailable, "no leader")
		}
		return 0, refused
	})
	assert.ErrorIs(t, err, refused)
	assert.Equal(t, int32(2), calls.Load(), "a transient failure is retried at once, a refusal returned")
}

// TestMembersLeaveAFailedOneLast: a member that did not answer is tried
// last until it answers again; the others keep the client's order.
func TestMembersLeaveAFailedOneLast(t *testing.T) {
	a, b, c := &memberConn{ep: "a"}, &memberConn{ep: "b"}, &memberConn{ep: "c"}
	m := &members{all: []*memberConn{a, b, c}}
	eps := func() (out []string) {
		for _, p := range m.order() {
			out = append(out, p.ep)
		}
		return out
	}
	assert.Equal(t, []string{"a", "b", "c"}, eps())
	m.note(a, false)
	assert.Equal(t, []string{"b", "c", "a"}, eps())
	m.note(b, false)
	assert.Equal(t, []string{"c", "a", "b"}, eps(), "the oldest failure before the newer")
	m.note(a, true)
	assert.Equal(t, []string{"a", "c", "b"}, eps(), "an answer brings it back")
}

// TestHedgeOnMovesToTheNextMember: a try stuck on one member is
// followed by one on the next, and the stuck member is noted as failed.
func TestHedgeOnMovesToTheNextMember(t *testing.T) {
	stuck, ok := &memberConn{ep: "stuck"}, &memberConn{ep: "ok"}
	m := &members{all: []*memberConn{stuck, ok}}
	v, err := hedgeOn(ctxT(t), m, readHedge/30, func(ctx context.Context, p *memberConn) (string, error) {
		if p == stuck {
			<-ctx.Done()
			return "", ctx.Err()
		}
		return p.ep, nil
	})
	require.NoError(t, err)
	assert.Equal(t, "ok", v)
	assert.Equal(t, "ok", m.order()[0].ep, "the member that did not answer in time goes last")
}
