package runnerstate

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/locktable"
)

// The sync mark: many syncs or imports may run on a data root at once, and a
// reset must run only while none does (SyncRunning, NoSyncRunning). It is a
// reader/writer lock on one file: syncs share it, a reset takes it alone.

// maxRecreated bounds how often SyncRunning and NoSyncRunning make the data
// root again when it is removed under them; each round means somebody is
// deleting it as fast as it is made.
const maxRecreated = 16

// ErrSyncRunning is NoSyncRunning's refusal: a sync or import holds the sync
// mark of the data root, so a reset now would pull the data from under it.
// It is also the answer when another reset holds the mark. The refusal is
// also a *BusyError (errors.Is(err, ErrBusy)) naming the mark's path.
var ErrSyncRunning = errors.New("runnerstate: a sync or import is running on this data root; reset again when it finishes")

// ErrSyncUnknown is NoSyncRunning's refusal when the sync mark cannot be
// taken at all (the filesystem refuses locks, sync.lock is a directory, a
// symlink or unreadable): nobody can tell whether a sync is running, and a
// reset must never be half-sure. The message names the path and what to do.
var ErrSyncUnknown = errors.New("runnerstate: cannot tell whether a sync or import is running on this data root")

// SyncRunning marks a sync or import as running on the data root: it takes a
// shared kernel lock on root/sync.lock, for the caller to hold for the whole
// sync and free with release (idempotent). Any number of syncs, in any
// processes, hold the mark together; while a reset holds it (NoSyncRunning),
// SyncRunning waits until the reset releases or ctx ends, without holding
// back other syncs. root is created (0755, with its parents) when it does not
// exist, and sync.lock (0644) in it; sync.lock is never truncated nor
// removed, and only read permission on it is needed.
//
// When the mark cannot be taken at all (the filesystem refuses locks,
// sync.lock is a directory, a symlink, not a regular file or unreadable),
// SyncRunning logs exactly one warning naming the path and returns a no-op
// release and a nil error: the sync runs unmarked. A reset then cannot take
// the mark either and is refused with ErrSyncUnknown, so running unmarked
// does not let a reset through (unless the reset runs as a user who can lock
// the file where this one cannot).
//
// Errors: when ctx ends while a reset holds the mark, a *BusyError naming
// sync.lock that satisfies errors.Is for ErrBusy and for ctx.Err(); an error
// naming root when root is empty, is not a directory or cannot be created.
// A wait that ends early may leave one goroutine blocked in flock(2) until the
// reset releases, as Lock documents.
func SyncRunning(ctx context.Context, root string) (release func(), err error) {
	if root == "" {
		return nil, errorf("SyncRunning: the data root is empty")
	}
	path := filepath.Join(root, syncLockName)
	for recreated := 0; ; recreated++ {
		if err := ensureDataRoot(root); err != nil {
			return nil, err
		}
		l, err := waitLock(ctx, path, filelock.Shared, 0o644, inspectLock)
		if err == nil {
			return l.Release, nil
		}
		var be *BusyError
		if errors.As(err, &be) {
			return nil, err
		}
		if isNotExist(err) && recreated < maxRecreated {
			continue // root was removed while we waited: make it again and lock there
		}
		logger().Warn("runnerstate: the sync mark cannot be taken; this sync runs unmarked, and resets are refused until the mark is fixed",
			"path", path, "err", err)
		return func() {}, nil
	}
}

// NoSyncRunning takes the sync mark of the data root alone, for a reset:
// an exclusive kernel lock on root/sync.lock, without waiting. While the
// caller holds it, no sync or import runs on root and a new one waits in
// SyncRunning. release (idempotent) frees it. root is created (0755, with its
// parents) when it does not exist, and sync.lock (0644) in it.
//
// A reset may delete everything in root except sync.lock and the lock files
// held there (a server's lock on its data dir): removing or replacing
// sync.lock while holding it would let a sync that starts meanwhile lock the
// new file and run beside the reset, and a deleted server lock would let a
// second server in.
//
// Errors:
//   - A sync or import holds the mark (or another reset does): an error
//     satisfying errors.Is for ErrSyncRunning and ErrBusy, with a *BusyError
//     (errors.As) naming sync.lock and, on Linux, a holder's pid; the
//     message names the path and every holder pid the kernel lists.
//   - The mark cannot be taken at all (the filesystem refuses locks, sync.lock
//     is a directory, a symlink, not a regular file or unreadable):
//     ErrSyncUnknown, in a message that names the path and says what to do:
//     stop every process using root, remove the path, and reset again. The
//     underlying error stays reachable (errors.Is(err,
//     ErrLockingUnsupported) on a filesystem without locks).
//   - An empty root, or a root that is not a directory or cannot be created:
//     an error naming root.
func NoSyncRunning(root string) (release func(), err error) {
	if root == "" {
		return nil, errorf("NoSyncRunning: the data root is empty")
	}
	path := filepath.Join(root, syncLockName)
	for recreated := 0; ; recreated++ {
		if err := ensureDataRoot(root); err != nil {
			return nil, err
		}
		l, err := filelock.TryLock(path, filelock.Exclusive, 0o644)
		switch {
		case err == nil:
			return l.Release, nil
		case errors.Is(err, filelock.ErrWouldBlock):
			return nil, syncBusy(path)
		case isNotExist(err) && recreated < maxRecreated:
			continue // root was removed under us: make it again
		}
		return nil, syncUnknown(root, path, public(err))
	}
}

// syncBusy is NoSyncRunning's answer when the mark is held: the holders the
// kernel lists (Linux), told apart as syncs (shared) and resets (exclusive).
func syncBusy(path string) error {
	be := &BusyError{Path: path}
	holders, _, _ := locktable.Holders(path)
	var shared, exclusive []int
	for _, h := range holders {
		if h.PID <= 0 {
			continue
		}
		if h.Exclusive {
			exclusive = append(exclusive, h.PID)
		} else {
			shared = append(shared, h.PID)
		}
	}
	slices.Sort(shared)
	shared = slices.Compact(shared)
	slices.Sort(exclusive)
	exclusive = slices.Compact(exclusive)
	var msg string
	switch {
	case len(exclusive) > 0:
		be.PID = exclusive[0]
		msg = "runnerstate: another reset holds " + path + " (" + pidList(exclusive) + "); reset again when it finishes"
	case len(shared) > 0:
		be.PID = shared[0]
		msg = ErrSyncRunning.Error() + ": " + path + " is held by " + pidList(shared)
	default:
		msg = ErrSyncRunning.Error() + ": " + path + " is held"
	}
	return &multiError{msg: msg, errs: []error{ErrSyncRunning, be}}
}

// syncUnknown is NoSyncRunning's answer when the mark cannot be taken at all.
func syncUnknown(root, path string, cause error) error {
	var why string
	odd := true // something stands at path that must go: remove it
	switch {
	case errors.Is(cause, ErrLockingUnsupported):
		why = "the filesystem refuses file locks"
	case errors.Is(cause, durable.ErrIsDir):
		why = "it is a directory"
	case errors.Is(cause, durable.ErrSymlink):
		why = "it is a symlink"
	case errors.Is(cause, durable.ErrNotRegular):
		why = "it is not a regular file"
	default:
		odd = false // read-only, permission, no descriptor left: the cause says what to do
		why = cause.Error()
		var pe *fs.PathError
		if errors.As(cause, &pe) {
			why = pe.Err.Error()
		}
	}
	msg := ErrSyncUnknown.Error() + ": " + path + " cannot be locked (" + why + "); "
	var fe *fsinfo.Error
	if errors.As(cause, &fe) {
		// Nothing at path must go: the filesystem's locks do not exclude.
		return &multiError{msg: ErrSyncUnknown.Error() + ": " + path + " cannot be locked: " + notExcluding(fe), errs: []error{ErrSyncUnknown, cause}}
	}
	if odd {
		msg += "stop every process that uses " + root + ", remove " + path + ", and reset again"
	} else {
		msg += "fix that, then reset again"
	}
	if errors.Is(cause, ErrLockingUnsupported) {
		msg += "; if locks still fail, move the data root to a local disk"
	}
	return &multiError{msg: msg, errs: []error{ErrSyncUnknown, cause}}
}

// multiError has a message of its own and stands for each of errs under
// errors.Is and errors.As.
type multiError struct {
	msg  string
	errs []error
}

func (e *multiError) Error() string { return e.msg }

func (e *multiError) Unwrap() []error { return e.errs }

// ensureDataRoot creates a data root (0755, parents too) when it does not
// exist and checks it is a directory: a generic primitive on a path the
// caller chooses, it keeps the modes it always had.
func ensureDataRoot(root string) error { return public(durable.EnsureDir(root, 0o755)) }
