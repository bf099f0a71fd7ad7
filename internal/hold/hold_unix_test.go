//go:build unix

package hold

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIndexFindsAHoldWhoseDirectoryIsGone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	var x Index
	h := newHold(t, dir, &files{})
	x.Add(h)
	require.NoError(t, os.Rename(dir, dir+".moved"))
	assert.Same(t, h, x.Of(dir), "found by the path it was taken under")
	lost, _ := h.Lost()
	assert.True(t, lost, "the directory is gone")

	// A directory made again under the same path, and held: its hold is
	// found by the directory's identity, the gone one by the path once the
	// new one is released.
	require.NoError(t, os.Mkdir(dir, 0o755))
	again := newHold(t, dir, &files{})
	x.Add(again)
	assert.Same(t, again, x.Of(dir))
	assert.Same(t, h, x.Of(dir+".moved"), "the moved directory is the first hold's by its identity")
	again.Release()
	assert.Same(t, h, x.Of(dir), "the first hold is found by its path again")
	h.Release()
	assert.Nil(t, x.Of(dir))
	assert.Nil(t, x.Of(dir+".moved"))
}

func TestHealStampsALockFileAnotherProgramErased(t *testing.T) {
	dir := t.TempDir()
	f := &files{}
	h := newHold(t, dir, f)
	for _, l := range h.Locks() {
		require.NoError(t, f.Stamp(h, l))
	}
	f.stamps = 0
	h.Heal(4096)
	assert.Zero(t, f.stamps, "nothing to heal")
	require.NoError(t, os.Truncate(filepath.Join(dir, "lock"), 0))
	h.Heal(4096)
	assert.Equal(t, 1, f.stamps, "the erased lock file is stamped again, the other left")
	data, err := os.ReadFile(filepath.Join(dir, "lock"))
	require.NoError(t, err)
	assert.True(t, f.Stamped(h, h.Locks()[0], data))
}

func TestLostSaysWhichLockFileWentAndReleaseLeavesItsSuccessorAlone(t *testing.T) {
	dir := t.TempDir()
	f := &files{}
	h := newHold(t, dir, f)
	lost, _ := h.Lost()
	assert.False(t, lost)
	require.NoError(t, os.Remove(filepath.Join(dir, "lock")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lock"), []byte("another's"), 0o600))
	lost, why := h.Lost()
	assert.True(t, lost)
	assert.Contains(t, why, filepath.Join(dir, "lock"))
	h.Release()
	assert.False(t, f.lockHere, "Tidy is told the lock file is not the hold's")
	data, err := os.ReadFile(filepath.Join(dir, "lock"))
	require.NoError(t, err)
	assert.Equal(t, "another's", string(data), "what stands at the path now is not cleared")
}

func TestReleaseClosesWhatItLent(t *testing.T) {
	h := newHold(t, t.TempDir(), &files{})
	lent, err := h.Lend()
	require.NoError(t, err)
	h.Release()
	assert.Error(t, lent.Close(), "Release closed the lent descriptor")
}
