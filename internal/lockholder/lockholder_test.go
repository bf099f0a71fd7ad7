package lockholder

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/locktable"
	"github.com/runnerstate/runnerstate/internal/testharness"
)

// line is what the tests write into a lock file: an identity and the
// descriptor it locked through.
type line struct {
	liveness.Identity
	FD int `json:"fd"`
}

func parse(data []byte) (liveness.Identity, int, bool) {
	var l line
	if json.Unmarshal(data, &l) != nil || l.PID <= 0 {
		return liveness.Identity{}, 0, false
	}
	return l.Identity, l.FD, true
}

// lockNamed takes path's lock and writes this process's identity into it.
func lockNamed(t *testing.T, path string) *filelock.File {
	t.Helper()
	l, err := filelock.TryExclusive(path)
	require.NoError(t, err)
	t.Cleanup(l.Release)
	data, err := json.Marshal(line{Identity: liveness.Current(), FD: int(l.Fd())})
	require.NoError(t, err)
	require.NoError(t, l.WriteContent(data))
	return l
}

// TestInspectMissingIsFree: a lock file that does not exist is free, and
// names nobody.
func TestInspectMissingIsFree(t *testing.T) {
	assert.Equal(t, State{}, Inspect(filepath.Join(testharness.TempDir(t), "x.lock"), 4096, parse))
}

// TestInspectVerifiesTheNamedHolder: a lock held by the process its content
// names is held, by that pid, verified.
func TestInspectVerifiesTheNamedHolder(t *testing.T) {
	if !filelock.CarriesContent {
		t.Skip("a locked file's content cannot be read here")
	}
	path := filepath.Join(testharness.TempDir(t), "x.lock")
	lockNamed(t, path)
	st := Inspect(path, 4096, parse)
	require.NoError(t, st.Err)
	assert.True(t, st.Held && st.Verified && st.Named, "%+v", st)
	assert.Equal(t, os.Getpid(), st.PID)
	assert.Equal(t, liveness.Self, st.Verdict)
}

// TestInspectRefusesASymlink: a symlink where the lock file belongs is an
// error, never followed.
func TestInspectRefusesASymlink(t *testing.T) {
	if !testharness.SymlinksWork() {
		t.Skip("os.Symlink makes no symlinks here")
	}
	dir := testharness.TempDir(t)
	path := filepath.Join(dir, "x.lock")
	require.NoError(t, os.Symlink(filepath.Join(dir, "target"), path))
	assert.ErrorIs(t, Inspect(path, 4096, parse).Err, durable.ErrSymlink)
}

// TestInspectPairLostFile: with the lock file gone, the tree lock held by
// the live holder it names says that holder lost its lock file and runs on.
func TestInspectPairLostFile(t *testing.T) {
	if !filelock.CarriesContent {
		t.Skip("a locked file's content cannot be read here")
	}
	dir := testharness.TempDir(t)
	p := Pair{Lock: filepath.Join(dir, "x.lock"), Tree: filepath.Join(dir, "y.lock"), Limit: 4096, Parse: parse,
		Hint: func() (Hint, bool) { return Hint{}, false }}
	lockNamed(t, p.Tree)
	st := InspectPair(p)
	require.NoError(t, st.Err)
	assert.True(t, st.LostFile && st.Held && st.Verified, "%+v", st)
	assert.False(t, st.TreeHeld)
	assert.Equal(t, os.Getpid(), st.PID)
}

// TestInspectPairHintConfirms: a hint naming the holder and the descriptor
// it locks through confirms it, and says so (ViaHintLock).
func TestInspectPairHintConfirms(t *testing.T) {
	if !locktable.ListsHolders() {
		t.Skip("only Linux shows a process's locks")
	}
	dir := testharness.TempDir(t)
	p := Pair{Lock: filepath.Join(dir, "x.lock"), Tree: filepath.Join(dir, "y.lock"), Limit: 4096, Parse: parse}
	l := lockNamed(t, p.Lock)
	p.Hint = func() (Hint, bool) { return Hint{ID: liveness.Current(), FD: int(l.Fd())}, true }
	st := InspectPair(p)
	assert.True(t, st.Held && st.Verified, "%+v", st)
	assert.Equal(t, ViaHintLock, st.Via)
}
