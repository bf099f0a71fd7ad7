//go:build linux

package runnerstate

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() { roles["probe-once"] = roleProbeOnce }

// probe-once: Running and Status of dir, once each; says what they found.
func roleProbeOnce(dir string) int {
	rec, ok, err := Running(dir)
	say("running %d %v %v", rec.PID, ok, err)
	r, err := Status(dir)
	say("status %d %v %v", r.Holder.PID, r.Verified, err)
	return 0
}

// TestProbeTouchesNoLockedFile traces (strace -f) a process that asks Running
// and Status about a directory whose verified runner published its record:
// neither opens a file of the directory that carries a lock, nor makes any
// flock call. Such an open and its close would wait behind every reader of
// /proc/locks on the machine (see holder.InspectPair), whatever it costs.
func TestProbeTouchesNoLockedFile(t *testing.T) {
	straceBin, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (apt-get install strace): this test traces a probe's system calls")
	}
	dir := tempDir(t)
	runner := startChild(t, "runner", dir)
	runner.Expect("acquired")

	out := filepath.Join(t.TempDir(), "trace")
	cmd := testharness.Command(dir, straceBin, "-f", "-qq", "-o", out, "-e", "trace=openat,open,flock")
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"=probe-once")
	said, err := cmd.Output()
	if err != nil && strings.Contains(string(said), "ptrace") {
		t.Skipf("strace cannot trace here: %s", said)
	}
	require.NoError(t, err, "%s", said)
	assert.Contains(t, string(said), "running "+strconv.Itoa(runner.PID())+" true <nil>")
	assert.Contains(t, string(said), "status "+strconv.Itoa(runner.PID())+" true <nil>")

	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	var opened []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		assert.NotContains(t, line, "flock(", "a probe made a flock call")
		if strings.Contains(line, dir) {
			opened = append(opened, line)
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, opened, "the trace shows no open under %s: strace traced nothing?", dir)
	for _, line := range opened {
		// Every file of the directory that carries a lock is named *.lock
		// (runner.lock, tree.lock, .state.lock).
		assert.NotContains(t, line, `.lock"`, "a probe opened a file that carries a lock")
	}
}
