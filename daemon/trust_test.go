//go:build unix

package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A directory name or an endpoint address that is not valid UTF-8 is
// refused, quoted, before anything is taken, bound or dialled: runner.json
// would have stored another path than the one bound.
func TestNonUTF8NamesAreRefused(t *testing.T) {
	parent := shortDir(t)
	bad := filepath.Join(parent, "d\xff")
	_, err := Listen(background(t), bad, Options{Endpoints: unixEndpoint("d.sock")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), strconv.Quote(bad))
	assert.Contains(t, err.Error(), "not valid UTF-8")
	assert.NoDirExists(t, bad, "nothing created")

	_, _, err = Dial(background(t), bad, nil, DialOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), strconv.Quote(bad))

	addr := filepath.Join(parent, "s\xfe.sock")
	_, err = Listen(background(t), parent, Options{Endpoints: unixEndpoint(addr)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), strconv.Quote(addr))
	assert.Contains(t, err.Error(), "not valid UTF-8")
	_, held, _ := runnerstate.Running(parent)
	assert.False(t, held, "nothing taken")
	entries, _ := os.ReadDir(parent)
	assert.Empty(t, entries, "nothing created or bound")
}
