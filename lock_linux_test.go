package runnerstate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Locks on FUSE views (bindfs), refused by default whatever the type says.

// bindfsViews is testharness.BindfsViews: two bindfs views of one real
// directory, unmounted when the test ends; it skips where FUSE cannot be
// mounted.
func bindfsViews(t *testing.T, subtype string) (real, a, b string) {
	t.Helper()
	return testharness.BindfsViews(t, subtype)
}

// By default every lock through a FUSE view is refused, named as mountinfo
// names the view, before anything is created, and nothing is left held.
func TestFuseViewsRefusedByDefault(t *testing.T) {
	real, a, _ := bindfsViews(t, "bindfs")
	dir := filepath.Join(a, "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	assertRefusedEverywhere(t, dir, "fuse.bindfs")
	entries, err := os.ReadDir(filepath.Join(real, "d"))
	require.NoError(t, err)
	for _, e := range entries {
		assert.True(t, e.IsDir(), "%s was created through a view", e.Name())
	}

	// The real path, a local disk, admits.
	release, err := Acquire(filepath.Join(real, "d"))
	require.NoError(t, err)
	release()
}

// bindfs without a subtype is "fuse" in mountinfo, and named so.
func TestFuseViewPlainTypeNamed(t *testing.T) {
	_, a, _ := bindfsViews(t, "")
	_, err := Acquire(filepath.Join(a, "d"))
	require.ErrorIs(t, err, ErrLockingUnsupported)
	assert.Contains(t, err.Error(), "is on fuse,")
	assert.Contains(t, err.Error(), "RUNNERSTATE_TRUST_FS=fuse ")
}
