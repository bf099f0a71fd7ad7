//go:build linux

package runnerstate

import (
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Each bug the fault matrix found, kept as a regression: one cell of the matrix, named by
// its operation, the class of call, which occurrence and the error, and
// planned from a dry run like every cell (no call count is written down
// here). Each runs in the default suite; see TestFaultMatrix for the whole
// matrix and what a cell asserts.
var faultRegressions = []struct {
	name  string
	op    string
	class string
	occ   string // first, middle, last
	errno syscall.Errno
}{
	// WriteContent cut the lock file's tail with one ftruncate(2) and
	// reported its EINTR: Acquire and AcquireScope failed on a signal.
	{"AcquireRetriesTruncateEINTR", "acquire", "ftruncate", "first", unix.EINTR},
	{"AcquireScopeRetriesTruncateEINTR", "scope", "ftruncate", "first", unix.EINTR},
	// ReadFileID opened without retrying EINTR: AppendLine failed on a
	// signal while it read the file it appends to.
	{"AppendLineRetriesOpenEINTR", "append", "openat(r)", "first", unix.EINTR},
	// RequestRestart took a restart.json it could not read for no request
	// at all, and wrote "drain" over a pending "now".
	{"RequestRestartNeverWeakensUnreadOpen", "request-weaker", "openat(r)", "last", unix.EIO},
	{"RequestRestartNeverWeakensUnreadRead", "request-weaker", "read", "first", unix.EIO},
	// ClearStale returned nil with the stale record still there (its
	// unlink failed, and was only logged), or with the dead runner still
	// named in runner.lock (its read or rewrite failed, unchecked).
	{"ClearStaleReportsRecordLeft", "clearstale", "unlinkat", "first", unix.EIO},
	{"ClearStaleReportsLockUnread", "clearstale", "pread64", "first", unix.EIO},
	{"ClearStaleReportsLockNotCleared", "clearstale", "ftruncate", "first", unix.EIO},
	{"ClearStaleReportsTreeNotCleared", "clearstale", "ftruncate", "last", unix.EIO},
	{"ClearStaleReportsRequestUnread", "clearstale", "openat(r)", "middle", unix.EIO},
	// A lock file whose stat failed counted as lost: Publish answered
	// ErrNotHolder, "removed or replaced while held", to the holder, and
	// WatchRestart would have told it RestartLost.
	{"PublishStatFailureIsNoLoss", "publish", "statx", "first", unix.EIO}, // AtPath's statx of the locked descriptor (fstat before it named the mount)
	{"PublishLstatFailureIsNoLoss", "publish", "newfstatat", "middle", unix.EACCES},
	// A runner's first Publish took a start.json it could not read for no
	// attempt at all: its ready mark was skipped, unlogged, and the
	// attempt left pending.
	{"StartMarkLogsUnreadOpen", "start-mark", "openat(r)", "first", unix.EIO},
	{"StartMarkLogsUnreadRead", "start-mark", "read", "first", unix.EIO},
}

func TestFaultRegressions(t *testing.T) {
	straceBin, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (apt-get install strace): the fault regressions need it")
	}
	m := &faultMatrix{strace: straceBin}
	ops := map[string]*faultOp{}
	for _, op := range faultOps {
		ops[op.name] = op
	}
	if ok, why := m.canAttach(t, &faultCase{op: faultOps[0]}); !ok {
		t.Skipf("strace cannot attach to a helper here (ptrace not permitted?): %s", why)
	}
	for _, r := range faultRegressions {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			op := ops[r.op]
			var calls []straceCall
			t.Run("dry", func(t *testing.T) { calls = m.cell(t, &faultCase{op: op}) })
			for _, c := range planCells(op, calls, true) {
				if c.class == r.class && c.occ == r.occ && c.errno == r.errno {
					t.Run(c.name(), func(t *testing.T) { m.cell(t, c) })
					return
				}
			}
			t.Fatalf("%s makes no %s call to fault any more (%s occurrence): update the regression", r.op, r.class, r.occ)
		})
	}
}
