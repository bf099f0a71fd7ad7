//go:build unix || windows

package runnerstate

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatusJSON(t *testing.T) {
	dir := tempDir(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, Publish(dir, Record{MaxParallel: 2}))
	require.NoError(t, RequestRestart(dir, RestartDrain))
	st, err := Status(dir)
	require.NoError(t, err)
	data, err := json.Marshal(st)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	for _, k := range []string{"dir", "held", "holder", "verified", "restart", "waiting", "stale", "warnings"} {
		assert.Contains(t, m, k)
	}
	assert.Equal(t, true, m["held"])
	assert.Equal(t, true, m["verified"])
	assert.Equal(t, "drain", m["restart"])
	assert.Equal(t, float64(os.Getpid()), m["holder"].(map[string]any)["pid"])
	assert.Equal(t, []any{}, m["waiting"])
	assert.Equal(t, []any{}, m["stale"])
	assert.Equal(t, []any{}, m["warnings"])
}

func TestStatusWarnsAboutWorldWritableDir(t *testing.T) {
	dir := tempDir(t)
	if !unixFiles {
		// Windows has no mode bits: Go reports every directory as 0777,
		// and who may write is an ACL's business. Nothing is warned.
		st, err := Status(dir)
		require.NoError(t, err)
		assert.Empty(t, st.Warnings)
		return
	}
	for _, mode := range []os.FileMode{0o777, os.ModeSticky | 0o777, 0o775} {
		require.NoError(t, os.Chmod(dir, mode))
		st, err := Status(dir)
		require.NoError(t, err)
		require.Len(t, st.Warnings, 1, "%v", mode)
		assert.Contains(t, st.Warnings[0], "other users can write it", "%v", mode)
		assert.Contains(t, st.Warnings[0], modeWords(mode), "names the mode")
	}
	require.NoError(t, os.Chmod(dir, 0o755))
	st, err := Status(dir)
	require.NoError(t, err)
	assert.Empty(t, st.Warnings)
}
