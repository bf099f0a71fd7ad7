package daemon

import (
	"context"
	"os"
	"testing"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Endpoint.Mode is a permission of a unix socket file: anything else is
// refused before anything is taken, naming the endpoint.
func TestEndpointModeRefusals(t *testing.T) {
	dir := testharness.TempDir(t)
	for _, tc := range []struct {
		ep   runnerstate.Endpoint
		want string
	}{
		{runnerstate.Endpoint{Network: "tcp", Address: "127.0.0.1:0", Mode: 0o666}, "applies to a unix socket file only"},
		{runnerstate.Endpoint{Network: "unix", Address: "d.sock", Mode: os.ModeSetuid | 0o600}, "is not a permission"},
		{runnerstate.Endpoint{Network: "unix", Address: "d.sock", Mode: os.ModeSticky | 0o666}, "is not a permission"},
	} {
		_, err := resolveEndpoints(context.Background(), dir, []runnerstate.Endpoint{tc.ep})
		require.Error(t, err, "%+v", tc.ep)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), "endpoint 0")
	}
	eps, err := resolveEndpoints(context.Background(), dir, []runnerstate.Endpoint{{Network: "unix", Address: "d.sock", Mode: 0o660}})
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o660), socketMode(eps[0].Endpoint))
	assert.Equal(t, os.FileMode(0o600), socketMode(runnerstate.Endpoint{Network: "unix"}), "the default")
}
