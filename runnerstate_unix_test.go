//go:build unix

package runnerstate

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Runner-directory tests that need Unix: what a refusal of a directory
// names, and what it leaves.

// Case: a file stands where a parent of the runner directory belongs
// (afile/sub). Every entry point refuses with one message that names the
// file, afile, and says what to do; the file is left as it was.
func TestParentThatIsAFileIsNamed(t *testing.T) {
	afile := filepath.Join(tempDir(t), "afile")
	require.NoError(t, os.WriteFile(afile, []byte("x\n"), 0o644))
	dir := filepath.Join(afile, "sub")
	named := func(op string, err error) {
		t.Helper()
		if assert.Error(t, err, op) {
			assert.ErrorIs(t, err, durable.ErrNotDir, op)
			assert.ErrorContains(t, err, "runnerstate: ", op)
			assert.ErrorContains(t, err, "its parent "+afile+" is not a directory; move "+afile+" away", op)
		}
	}
	_, err := Acquire(dir)
	named("Acquire", err)
	_, err = Takeover(background(t), dir, TakeoverOptions{})
	named("Takeover", err)
	_, err = Status(dir)
	named("Status", err)
	_, _, err = Running(dir)
	named("Running", err)
	_, _, err = ClearStale(dir)
	named("ClearStale", err)
	named("RequestRestart", RequestRestart(dir, RestartNow))
	_, err = Standby(background(t), dir, StandbyOptions{})
	named("Standby", err)
	named("SaveLines", SaveLines(dir, "state", []string{"x"}))
	data, err := os.ReadFile(afile)
	require.NoError(t, err)
	assert.Equal(t, "x\n", string(data))
}

// Case: a refused start writes no files. With a directory (or a symlink)
// where a lock or gate file belongs, Acquire and Takeover refuse naming it
// and leave the directory as they found it: no .state.lock, no gate.json,
// no other lock file.
func TestRefusedStartWritesNoFiles(t *testing.T) {
	for _, name := range []string{LockName, treeLockName, stateLockName, gateName} {
		for _, op := range []string{"Acquire", "Takeover"} {
			t.Run(name+"/"+op, func(t *testing.T) {
				dir := tempDir(t)
				p := filepath.Join(dir, name)
				require.NoError(t, os.Mkdir(p, 0o755))
				var err error
				if op == "Acquire" {
					_, err = Acquire(dir)
				} else {
					_, err = Takeover(background(t), dir, TakeoverOptions{})
				}
				require.ErrorIs(t, err, durable.ErrIsDir)
				assert.ErrorContains(t, err, p)
				entries, err := os.ReadDir(dir)
				require.NoError(t, err)
				require.Len(t, entries, 1, "only the intruder is there")
				assert.Equal(t, name, entries[0].Name())
			})
		}
	}
}
