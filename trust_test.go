//go:build unix || windows

package runnerstate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/liveness"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Point 6: a directory name that is not valid UTF-8 is refused by every
// call that takes one, before anything is created, with the name quoted;
// JSON would have stored it lossily in runner.json.
func TestNonUTF8NamesAreRefused(t *testing.T) {
	parent := tempDir(t)
	dir := filepath.Join(parent, "run\xff")
	quoted := strconv.Quote(dir)
	ctx := context.Background()
	calls := map[string]func() error{
		"Acquire":        func() error { _, err := Acquire(dir); return err },
		"Running":        func() error { _, _, err := Running(dir); return err },
		"ClearStale":     func() error { _, _, err := ClearStale(dir); return err },
		"Status":         func() error { _, err := Status(dir); return err },
		"Publish":        func() error { return Publish(dir, Record{}) },
		"SaveLines":      func() error { return SaveLines(dir, "x", nil) },
		"LoadLines":      func() error { _, err := LoadLines(dir, "x"); return err },
		"AppendLine":     func() error { return AppendLine(dir, "x", "y") },
		"MigrateFile":    func() error { return MigrateFile(dir, "x", "y") },
		"RequestRestart": func() error { return RequestRestart(dir, RestartNow) },
		"ClearRestart":   func() error { return ClearRestart(dir) },
		"Takeover":       func() error { _, err := Takeover(ctx, dir, TakeoverOptions{}); return err },
		"Standby":        func() error { _, err := Standby(ctx, dir, StandbyOptions{}); return err },
		"Start":          func() error { _, err := Start(ctx, dir, nil, StartOptions{}); return err },
		"Inherit":        func() error { return Inherit(dir, nil) },
		"AcquireScope": func() error {
			_, err := AcquireScope(ctx, dir, parent)
			return err
		},
	}
	for name, call := range calls {
		err := call()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), quoted, name)
		assert.Contains(t, err.Error(), "not valid UTF-8", name)
		assert.True(t, strings.HasPrefix(err.Error(), "runnerstate: "), name)
		_, statErr := os.Lstat(dir)
		assert.True(t, os.IsNotExist(statErr), "%s created %s", name, quoted)
	}
}

// Point 6: a record whose endpoint address is not valid UTF-8 is not
// published: what is stored must be what was bound.
func TestPublishRefusesANonUTF8Endpoint(t *testing.T) {
	dir := tempDir(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	addr := filepath.Join(dir, "d\xfe.sock")
	err = Publish(dir, Record{Endpoints: []Endpoint{{Network: "unix", Address: addr}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), strconv.Quote(addr))
	assert.Contains(t, err.Error(), "not valid UTF-8")
	assert.NoFileExists(t, filepath.Join(dir, RecordName), "nothing was published")
}

// Point 8: a restart request and a waiting starter dated more than a
// minute ahead (2099, as forged) bind nobody: the runner admitted is not
// asked to leave, no server counts the starter as waiting or steps aside
// for it, and Status lists both as void.
func TestEntriesDatedAheadBindNobody(t *testing.T) {
	dir := tempDir(t)
	forgedAt := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	other := liveness.Current()
	other.PIDNS = "0:1" // a starter in another PID namespace: unverifiable
	gateLine, err := json.Marshal(gateState{Seq: 9, Waiting: []gateEntry{{Seq: 9, Starter: other, Since: forgedAt, Program: "p"}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, gateName), append(gateLine, '\n'), 0o644))
	reqLine, err := json.Marshal(restartRequest{Mode: RestartNow, RequestedAt: forgedAt})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, RestartName), append(reqLine, '\n'), 0o644))

	_, ok := RestartRequested(dir)
	assert.False(t, ok, "a request dated 2099 is void")
	g, _, err := gate.Read(dir)
	require.NoError(t, err)
	assert.Empty(t, g.Successors(), "nobody waits, so nobody receives the sockets")
	r, err := Status(dir)
	require.NoError(t, err)
	assert.Empty(t, r.Restart)
	assert.Empty(t, r.Waiting)
	assert.True(t, anyContains(r.Warnings, filepath.Join(dir, gateName), "void"), "%q", r.Warnings)
	assert.True(t, anyContains(r.Warnings, filepath.Join(dir, RestartName), "void"), "%q", r.Warnings)

	release, err := Takeover(background(t), dir, TakeoverOptions{Program: "p"})
	require.NoError(t, err, "admitted past the void starter")
	defer release()
	_, ok = RestartRequested(dir)
	assert.False(t, ok)
	assert.NoFileExists(t, filepath.Join(dir, RestartName), "the admission retired the forged request")
}

// anyContains reports whether one of lines contains every one of parts.
func anyContains(lines []string, parts ...string) bool {
	for _, l := range lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}
