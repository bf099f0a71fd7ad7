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
