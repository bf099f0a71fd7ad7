//go:build unix

package runnerstate

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Point 2: runner.json, restart.json and gate.json are 0644 whatever the
// umask (every local user may read them, as v0.2 promised), and
// .state.lock is 0600 (a reader's flock on it must never stall writers),
// one an older build made 0644 included.
func TestFileModesWhateverTheUmask(t *testing.T) {
	dir := tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, stateLockName), nil, 0o644))
	require.NoError(t, os.Chmod(filepath.Join(dir, stateLockName), 0o644))
	old := syscall.Umask(0o077)
	release, err := Takeover(background(t), dir, TakeoverOptions{})
	if err == nil {
		err = Publish(dir, Record{Specs: []string{"modes"}})
	}
	if err == nil {
		err = RequestRestart(dir, RestartDrain)
	}
	syscall.Umask(old)
	require.NoError(t, err)
	defer release()
	for _, name := range []string{RecordName, RestartName, gateName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "%s under umask 077", name)
	}
	fi, err := os.Stat(filepath.Join(dir, stateLockName))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the state lock")
}
