//go:build unix

package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// One Dial starts at most maxStartFailures copies in all, whatever holds
// the directory: with an older server holding it (so that each Dial starts
// a copy to replace it) and every copy failing at once, a Dial used to
// start copies until its context ended (620 in 5 s).
func TestOneDialStartsAtMostThreeCopies(t *testing.T) {
	dir := shortDir(t)
	release, err := runnerstate.Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, runnerstate.Publish(dir, runnerstate.Record{Program: "echo", Version: "v1.0.0", Endpoints: unixEndpoint(filepath.Join(dir, "d.sock"))}))
	count := filepath.Join(dir, "started")
	cmd := exec.Command("sh", "-c", `echo x >> "$0"; exit 7`, count)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err = Dial(ctx, dir, cmd, DialOptions{Program: "echo", Version: "v2.0.0"})
	var se *runnerstate.StartError
	require.ErrorAs(t, err, &se, "the last copy's failure: %v", err)
	assert.Equal(t, 7, se.ExitCode)
	assert.NoError(t, ctx.Err(), "returned before its context ended")
	data, err := os.ReadFile(count)
	require.NoError(t, err)
	// Here Start's backoff (TestDialBacksOffAFailingServer) ends it at the
	// second failure, which opens a window: never more than the bound.
	n := strings.Count(string(data), "x")
	assert.GreaterOrEqual(t, n, 2, "copies started by one Dial")
	assert.LessOrEqual(t, n, maxStartFailures, "copies started by one Dial")
}
