//go:build unix || windows

package runnerstate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goneIdentity is the identity of a process that is provably gone: this
// process's, with start ticks it never had (Stale: its pid names another
// process now).
func goneIdentity() Identity {
	id := Self()
	id.StartTicks++
	id.Instance = "gone"
	return id
}

// writeLingerFile writes l as dir's linger.json, as another process would
// have.
func writeLingerFile(t *testing.T, dir string, l Lingering) {
	t.Helper()
	data, err := protocolLine(l)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, LingerName), data, 0o644))
}

// WriteLingering writes this process's record (Holder set to Self), and
// keeps End when it rewrites its own; ReadLingering reads it back;
// RemoveLingering removes only its own.
func TestWriteLingeringRoundTrip(t *testing.T) {
	dir := tempDir(t)
	_, ok, err := ReadLingering(dir)
	require.NoError(t, err)
	assert.False(t, ok, "absent")
	now := time.Now().Truncate(time.Second)
	l := Lingering{Holder: Identity{PID: 1}, Since: now, Deadline: now.Add(5 * time.Second), KillAt: now.Add(10 * time.Second), Open: 3}
	require.NoError(t, WriteLingering(dir, l))
	got, ok, err := ReadLingering(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.True(t, sameProcess(got.Holder, Self()), "Holder is this process")
	assert.Equal(t, 3, got.Open)
	assert.True(t, got.KillAt.Equal(l.KillAt))

	// End, once set, is kept by the next rewrite.
	data, err := os.ReadFile(filepath.Join(dir, LingerName))
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(data, &raw))
	assert.EqualValues(t, 1, raw["protocol"])
	got.End = LingerEndNow
	writeLingerFile(t, dir, got)
	l.Open = 1
	require.NoError(t, WriteLingering(dir, l))
	got, _, _ = ReadLingering(dir)
	assert.Equal(t, LingerEndNow, got.End)
	assert.Equal(t, 1, got.Open)

	require.NoError(t, RemoveLingering(dir))
	_, ok, _ = ReadLingering(dir)
	assert.False(t, ok, "removed")
	require.NoError(t, RemoveLingering(dir), "absent: nil")
	require.NoError(t, RemoveLingering(filepath.Join(dir, "nowhere")), "no dir: nil")
}

// A record of a process provably gone is replaced by WriteLingering,
// removed by EndLingering and ReapLingering, and never removed by
// RemoveLingering (not this process's).
func TestLingeringOfAGoneProcess(t *testing.T) {
	dir := tempDir(t)
	gone := Lingering{Holder: goneIdentity(), KillAt: time.Now().Add(time.Hour)}
	writeLingerFile(t, dir, gone)
	require.NoError(t, RemoveLingering(dir))
	got, ok, err := ReadLingering(dir)
	require.NoError(t, err)
	require.True(t, ok, "another's record stays")
	assert.Equal(t, "gone", got.Holder.Instance)

	_, ok, err = EndLingering(dir)
	require.NoError(t, err)
	assert.False(t, ok)
	_, ok, _ = ReadLingering(dir)
	assert.False(t, ok, "EndLingering removed a gone process's record")

	writeLingerFile(t, dir, gone)
	assert.True(t, ReapLingering(dir).IsZero())
	_, ok, _ = ReadLingering(dir)
	assert.False(t, ok, "ReapLingering removed a gone process's record")

	writeLingerFile(t, dir, gone)
	require.NoError(t, WriteLingering(dir, Lingering{}))
	got, _, _ = ReadLingering(dir)
	assert.True(t, sameProcess(got.Holder, Self()), "replaced")
}

// A linger.json that does not parse is an error naming it for a reader,
// and replaced by a writer.
func TestLingeringCorrupt(t *testing.T) {
	dir := tempDir(t)
	path := filepath.Join(dir, LingerName)
	require.NoError(t, os.WriteFile(path, []byte("{not json"), 0o644))
	_, ok, err := ReadLingering(dir)
	assert.False(t, ok)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	captureLog(t)
	require.NoError(t, WriteLingering(dir, Lingering{}))
	_, ok, err = ReadLingering(dir)
	require.NoError(t, err)
	assert.True(t, ok)
}

// Retake is only for a process its own linger.json names.
func TestRetakeRefusedWithoutOwnRecord(t *testing.T) {
	dir := tempDir(t)
	require.NoError(t, ensureRunnerDir(dir))
	_, err := Retake(dir, Record{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not name this process")
	writeLingerFile(t, dir, Lingering{Holder: goneIdentity()})
	_, err = Retake(dir, Record{})
	require.Error(t, err)
	_, statErr := os.Stat(filepath.Join(dir, RecordName))
	assert.True(t, isNotExist(statErr), "nothing published")
}

// Retake admits a lingering process when the directory is free: the
// record published ready, linger.json removed, the restart request that
// made it leave retired; release lets it go.
func TestRetakeWhenFree(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	require.NoError(t, Publish(dir, Record{}))
	release()
	require.NoError(t, ensureRunnerDir(dir))
	_, err = requestRestart(background(t), dir, RestartDrain, goneIdentity())
	require.NoError(t, err)
	require.NoError(t, WriteLingering(dir, Lingering{Retaking: true}))
	require.NoError(t, updateGate(background(t), dir, func(g *gateState) error { g.Handover = "@gone"; return nil }))

	release, err = Retake(dir, Record{Specs: []string{"x"}})
	require.NoError(t, err)
	rec := recordNow(t, dir)
	assert.True(t, rec.Ready)
	assert.Equal(t, []string{"x"}, rec.Specs)
	assert.Equal(t, Self().PID, rec.PID)
	_, ok, _ := ReadLingering(dir)
	assert.False(t, ok, "linger.json removed")
	_, ok = RestartRequested(dir)
	assert.False(t, ok, "the request that made it leave is retired")
	g, _ := readGate(dir)
	assert.Empty(t, g.Handover)
	_, err = Retake(dir, Record{})
	require.Error(t, err, "no record names it any more")
	release()
	_, statErr := os.Stat(filepath.Join(dir, RecordName))
	assert.True(t, isNotExist(statErr), "released")
}

// Retake never goes ahead of a live waiting starter, and never takes a
// held directory.
func TestRetakeRefusedWhileAStarterWaitsOrHeld(t *testing.T) {
	dir := tempDir(t)
	require.NoError(t, ensureRunnerDir(dir))
	require.NoError(t, WriteLingering(dir, Lingering{}))
	// This process as the waiting starter: Live, as a starter in another
	// process would be.
	require.NoError(t, updateGate(background(t), dir, func(g *gateState) error {
		g.JoinAs(gate.Entry{Starter: liveness.Identity(Self()), Since: time.Now(), Linger: true})
		return nil
	}))
	_, err := Retake(dir, Record{})
	require.ErrorIs(t, err, ErrBusy)
	assert.Contains(t, err.Error(), "waits for it")
	_, statErr := os.Stat(filepath.Join(dir, RecordName))
	assert.True(t, isNotExist(statErr), "nothing published")
	g, _ := readGate(dir)
	require.Len(t, g.Waiting, 1)
	assert.True(t, g.Waiting[0].Linger)
	assert.True(t, g.Successors() == nil || !g.Successors()[0].Linger, "no rendezvous: no successor")

	require.NoError(t, updateGate(background(t), dir, func(g *gateState) error { g.Waiting = nil; return nil }))
	release, err := Acquire(dir)
	require.NoError(t, err)
	_, err = Retake(dir, Record{})
	require.ErrorIs(t, err, ErrBusy, "held")
	release()
	release, err = Retake(dir, Record{})
	require.NoError(t, err)
	release()
}

// EndLingering leaves this process's own record alone, and answers ok
// false when there is none.
func TestEndLingeringOwnOrNone(t *testing.T) {
	dir := tempDir(t)
	_, ok, err := EndLingering(dir)
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, WriteLingering(dir, Lingering{}))
	_, ok, err = EndLingering(dir)
	require.NoError(t, err)
	assert.False(t, ok)
	got, _, _ := ReadLingering(dir)
	assert.Empty(t, got.End)
}

// The gate records a starter's Linger and a successor carries it.
func TestGateRecordsLinger(t *testing.T) {
	var g gate.State
	g.JoinAs(gate.Entry{Starter: liveness.Identity(Self()), Since: time.Now(), Rendezvous: "@a", Linger: true})
	s := g.Successors()
	require.Len(t, s, 1)
	assert.True(t, s[0].Linger)
	data, err := json.Marshal(g)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"linger":true`)
}

// Status reports a lingering server while its process is not provably
// gone, warns of one past its kill_at and of a record that cannot be read.
func TestStatusReportsLingering(t *testing.T) {
	dir := tempDir(t)
	r, err := Status(dir)
	require.NoError(t, err)
	assert.Nil(t, r.Lingering)
	require.NoError(t, WriteLingering(dir, Lingering{Open: 2, KillAt: time.Now().Add(-time.Second)}))
	r, err = Status(dir)
	require.NoError(t, err)
	require.NotNil(t, r.Lingering)
	assert.Equal(t, 2, r.Lingering.Open)
	assert.Contains(t, strings.Join(r.Warnings, "\n"), "outlived its kill_at")
	data, err := json.Marshal(r)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"lingering":{`)

	writeLingerFile(t, dir, Lingering{Holder: goneIdentity()})
	r, _ = Status(dir)
	assert.Nil(t, r.Lingering, "gone")
	data, _ = json.Marshal(r)
	assert.NotContains(t, string(data), `"lingering"`)

	require.NoError(t, os.WriteFile(filepath.Join(dir, LingerName), []byte("[]"), 0o644))
	r, _ = Status(dir)
	assert.Nil(t, r.Lingering)
	assert.Contains(t, strings.Join(r.Warnings, "\n"), filepath.Join(dir, LingerName))
}
