//go:build unix || windows

package runnerstate

import (
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/locktable"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

// Multi-process tests re-execute the test binary to play one of roles,
// through internal/testharness; TestMain runs the role instead of the tests
// in a child.
func TestMain(m *testing.M) {
	testharness.RunRole(roles)
	goleak.VerifyTestMain(m)
}

// roles are the roles a child can play, by name. Each test file registers
// the roles its tests start (registerRole, in an init beside the role), as
// os/exec's exec_test.go registers its helper commands; roles_test.go
// registers those that tests of several files start.
// TestEveryRoleIsStarted holds each to a test that starts it.
var roles = testharness.Roles{}

// registerRole adds role to roles under name; a name registered twice
// panics, so that two files cannot each believe a name plays their role.
func registerRole(name string, role testharness.Role) {
	if _, dup := roles[name]; dup {
		panic(fmt.Sprintf("runnerstate tests: role %q registered twice", name))
	}
	roles[name] = role
}

// The harness, in this package's words.
type child = testharness.Child

const childWait = testharness.Wait

var (
	say          = testharness.Say
	commands     = testharness.Commands
	eventually   = testharness.Eventually
	background   = testharness.Bounded
	symlinksWork = testharness.SymlinksWork
	needSymlinks = testharness.NeedSymlinks
)

// tempDir is testharness.TempDir, whose cleanup first waits for the parked
// goroutines of the test's waits to leave: a wait that ended early leaves
// one blocked until the holder (usually a child, killed by then) lets go,
// and on Windows the lock file it still has open could not be removed.
func tempDir(t testing.TB) string {
	t.Helper()
	dir := testharness.TempDir(t)
	t.Cleanup(func() {
		eventually(t, "the parked lock waiters leave", func() bool { return filelock.Parked() == 0 })
	})
	return dir
}

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

// What a test may expect of the platform. The portable tests run on Linux
// and on Windows (under Wine 8 in CI); an expectation that only some
// platforms meet is guarded by one of these, named for the property, so that
// the rest of the test still runs everywhere. What needs Linux itself
// (injected flock errors, the kernel's list of blocked waiters, FIFOs) is in
// helper_linux_test.go, with its answers elsewhere in
// helper_nolinux_test.go.
var (
	// kernelNamesHolders: the kernel lists every lock's holders (Linux's
	// /proc/locks), so a busy answer names the holder of any lock file.
	// Elsewhere a bare lock's holder is unknown (PID 0); a runner's or a
	// scope's is named from what it recorded.
	kernelNamesHolders = locktable.ListsHolders()
	// lockFileReadable: a held lock file can be read through another handle
	// and carries its holder's identity. Not on Windows, whose LockFileEx
	// locks are mandatory: nobody else can read the locked byte.
	lockFileReadable = runtime.GOOS != "windows"
	// unixFiles: Unix file modes, FIFOs and uids.
	unixFiles = runtime.GOOS != "windows"
	// removeOpenFiles: a file another process has open can be removed or
	// renamed (Windows refuses while a handle without delete sharing is
	// open, as the lock's is).
	removeOpenFiles = runtime.GOOS != "windows"
	// posixSignals: SIGTERM can be sent and caught (Windows has only
	// TerminateProcess, which liveness sends as SIGKILL).
	posixSignals = runtime.GOOS != "windows"
)

// assertWouldBlock checks that a busy answer also matches EWOULDBLOCK, as
// it does on Unix; Windows has no such answer for locks.
func assertWouldBlock(t testing.TB, err error) {
	t.Helper()
	if filelock.WouldBlockErrno != nil {
		assert.ErrorIs(t, err, syscall.EWOULDBLOCK)
	}
}

// awaitBlocked waits until n processes are blocked on the lock at path,
// where the kernel shows it (Linux). Elsewhere a waiter cannot be seen
// waiting, and the test goes on at once: it still checks what follows, only
// without knowing that the waiter was already blocked.
func awaitBlocked(t testing.TB, what, path string, n int) {
	t.Helper()
	if canSeeBlockedWaiters {
		eventually(t, what, func() bool { return blockedOn(t, path) == n })
	}
}

// injectLockErrorOrSkip makes every lock call fail with errno until restore
// is called, or skips the test where that cannot be done.
func injectLockErrorOrSkip(t testing.TB, errno error) (restore func()) {
	t.Helper()
	if !canInjectLockErrors {
		t.Skip("flock(2) errors are injected on Linux only")
	}
	return injectFlockError(errno)
}

// awaitHolder waits until pid holds the exclusive lock at path, as the
// kernel names it (Linux). Where the kernel names no holders it waits until
// a probe finds the lock held: the caller has made sure that only pid can
// hold it then.
func awaitHolder(t testing.TB, what, path string, pid int) {
	t.Helper()
	eventually(t, what, func() bool {
		if holds, known := locktable.HoldsExclusive(path, pid); known {
			return holds
		}
		held, err := filelock.ProbeHeld(path)
		return err == nil && held
	})
}

// setAsideCopies are the set-aside copies of dir/name, oldest first.
func setAsideCopies(t testing.TB, dir, name string) []string {
	t.Helper()
	copies, err := filepath.Glob(filepath.Join(dir, name+corruptSuffix+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return copies
}

// setAsideCopy is the one set-aside copy of dir/name, or "" when there is
// not exactly one.
func setAsideCopy(t testing.TB, dir, name string) string {
	t.Helper()
	if copies := setAsideCopies(t, dir, name); len(copies) == 1 {
		return copies[0]
	}
	return ""
}
