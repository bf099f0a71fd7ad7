package runnerstate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReaperCreatesNothing: the reaper that Start leaves running in the
// caller's process, once its runner is killed, records nothing in a
// directory removed meanwhile, nor in another directory made at its path:
// a test's TempDir cleanup never fails because of it, and no file appears
// where the caller did not ask for one. (Run beside a CPU hog, the reaper
// falls anywhere in the removal.)
func TestReaperCreatesNothing(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		name := map[bool]string{false: "removed", true: "replaced"}[replaced]
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(tempDir(t), "d")
			cmd := testharness.Command(dir)
			cmd.Env = append(os.Environ(), testharness.RoleEnv+"=portable-runner")
			_, err := Start(background(t), dir, cmd, StartOptions{})
			require.NoError(t, err)
			require.NoError(t, cmd.Process.Kill())
			require.NoError(t, os.RemoveAll(dir), "nothing is created in the directory while it is removed")
			if replaced {
				require.NoError(t, os.Mkdir(dir, 0o755))
			}
			eventually(t, "the runner is reaped and its end settled", func() bool { return reaped(dir) })
			if !replaced {
				_, err := os.Lstat(dir)
				assert.ErrorIs(t, err, os.ErrNotExist, "the directory is not made again")
				return
			}
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			assert.Empty(t, names, "nothing is written in the directory made at its path")
		})
	}
}
