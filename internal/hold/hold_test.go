package hold

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
)

// files stamps a lock with its descriptor's number and records what Tidy
// saw.
type files struct {
	tidied   int
	lockHere bool
	treeBusy bool // the tree lock was still held when Tidy ran
	stamps   int
}

func (f *files) Stamp(h *Hold, l *filelock.File) error {
	f.stamps++
	return l.WriteContent([]byte(strconv.Itoa(int(l.Fd()))))
}

func (f *files) Stamped(h *Hold, l *filelock.File, data []byte) bool {
	return string(data) == strconv.Itoa(int(l.Fd()))
}

func (f *files) Tidy(h *Hold, lockHere bool) {
	f.tidied++
	f.lockHere = lockHere
	l, err := filelock.TryLock(filepath.Join(h.Dir(), "tree"), filelock.Exclusive, 0o600)
	if err == nil {
		l.Release()
	}
	f.treeBusy = err != nil
}

// newHold takes dir's two locks ("lock" and "tree") and makes them a hold.
func newHold(t *testing.T, dir string, f Files) *Hold {
	t.Helper()
	lock, err := filelock.TryExclusive(filepath.Join(dir, "lock"))
	require.NoError(t, err)
	tree, err := filelock.TryExclusive(filepath.Join(dir, "tree"))
	require.NoError(t, err)
	h, err := New(dir, lock, tree, liveness.Current(), f)
	require.NoError(t, err)
	t.Cleanup(h.Release)
	return h
}

func TestIndexFindsAHoldByEitherSpellingOfItsDirectory(t *testing.T) {
	dir := testharness.TempDir(t)
	var x Index
	assert.Nil(t, x.Of(dir), "an empty index holds nothing")
	h := newHold(t, dir, &files{})
	x.Add(h)
	assert.Same(t, h, x.Of(dir))
	assert.Same(t, h, x.Of(filepath.Join(dir, "..", filepath.Base(dir))), "another spelling of the directory")
	assert.Nil(t, x.Of(testharness.TempDir(t)), "another directory")
	h.Release()
	assert.Nil(t, x.Of(dir), "a released hold leaves its index")
}

func TestReleaseTidiesBeforeTheLocksGo(t *testing.T) {
	dir := testharness.TempDir(t)
	f := &files{}
	h := newHold(t, dir, f)
	require.Len(t, h.Locks(), 2)
	h.Release()
	h.Release()
	assert.Equal(t, 1, f.tidied, "Release is idempotent")
	assert.True(t, f.lockHere)
	assert.True(t, f.treeBusy, "the tree lock is still held while Tidy runs")
	_, err := h.Lend()
	assert.ErrorIs(t, err, ErrReleased)
	lost, why := h.Lost()
	assert.False(t, lost, "a released hold has lost nothing")
	assert.Empty(t, why)
	for _, name := range []string{"lock", "tree"} {
		l, err := filelock.TryExclusive(filepath.Join(dir, name))
		require.NoError(t, err, "%s is free after Release", name)
		l.Release()
	}
}
