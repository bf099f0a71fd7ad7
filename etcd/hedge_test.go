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

// TestHedgeRoutesAroundAStuckAttempt: an attempt that never answers (as on
// a frozen member) does not hold the call; the stuck one is cancelled and
// waited for before hedge returns.
func TestHedgeRoutesAroundAStuckAttempt(t *testing.T) {
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
	assert.Equal(t, int32(1), ended.Load(), "the stuck attempt ended before hedge returned")
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
