//go:build linux

package runnerstate

import (
	"log/slog"
	"os/exec"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"go.uber.org/goleak"
)

// Multi-process tests re-execute the test binary to play one of roles
// (roles_test.go), through internal/testharness; TestMain runs the role
// instead of the tests in a child.
func TestMain(m *testing.M) {
	testharness.RunRole(roles)
	goleak.VerifyTestMain(m)
}

// The harness, in this package's words.
type child = testharness.Child

const childWait = testharness.Wait

var (
	say        = testharness.Say
	commands   = testharness.Commands
	eventually = testharness.Eventually
	background = testharness.Bounded
)

// startChild starts the test binary in role with arg; it is killed and
// reaped when the test ends.
func startChild(t testing.TB, role, arg string) *child {
	t.Helper()
	return testharness.Start(t, role, arg)
}

// startChildCmd is startChild for a command the caller prepared (another
// uid, a namespace, a prefix command, more environment); see
// testharness.Command.
func startChildCmd(t testing.TB, cmd *exec.Cmd, role string) *child {
	t.Helper()
	return testharness.StartCmd(t, cmd, role)
}

// captureLog captures the package's warnings for the length of a test.
func captureLog(t *testing.T) *testharness.LogBuffer {
	b := &testharness.LogBuffer{}
	SetLogger(slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { SetLogger(nil) })
	return b
}
