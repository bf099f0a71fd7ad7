package runnerstate

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// Two more coordination shapes besides the runner lock:
//
//   - One server per scope: several would-be servers share a scope directory
//     and only one may serve at a time (AcquireScope). The refused one learns
//     which data dir the other serves from a sidecar file beside the lock.
//   - The sync mark: many syncs or imports may run on a data root at once, and
//     a reset must run only while none does (SyncRunning, NoSyncRunning). It is
//     a reader/writer lock on one file: syncs share it, a reset takes it alone.

// maxRecreated bounds how often SyncRunning and NoSyncRunning make the data
// root again when it is removed under them; each round means somebody is
// deleting it as fast as it is made.
const maxRecreated = 16

// The files of a scope directory and of a data root.
const (
	scopeLockName  = "scope.lock"       // the scope's kernel lock; the holder's identity in it
	scopeOwnerName = "scope.owner.json" // the holder's ScopeOwner, a hint for refusal messages
	syncLockName   = "sync.lock"        // the sync mark in a data root
)

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

// ScopeOwner is what the holder of a scope writes into scope.owner.json
// beside scope.lock: the data dir it serves and who it is.
//
// Trust: a ScopeOwner is a hint that names the holder in a refusal message,
// nothing more. It is never liveness evidence: a holder killed with SIGKILL
// leaves its ScopeOwner behind until the next holder replaces it, while the
// kernel lock it held is already free. Ask the lock, not this file, whether a
// server is running.
type ScopeOwner struct {
	DataDir string   `json:"data_dir"`         // the data dir the holder serves, absolute
	PID     int      `json:"pid"`              // the holder's pid, as seen in its PID namespace
	Process Identity `json:"process,omitzero"` // the holder's full identity
}

// AcquireScope makes this process the one server of scopeDir, serving
// dataDir. It creates scopeDir (0755, with its parents) when it does not
// exist, takes the exclusive kernel lock on scopeDir/scope.lock, waiting
// until it is free or ctx ends, writes this process's Identity into the lock
// file (except on Windows, where a locked file cannot be read), and then
// writes scope.owner.json (a ScopeOwner with dataDir made absolute)
// atomically, as docs/protocol.md says. dataDir is neither created nor
// touched.
//
// release removes scope.owner.json first, then clears the lock file's content
// and frees the lock, so a successor never finds the lock free while the
// sidecar still names this process. It is idempotent. A process that dies
// without calling release loses the lock at once all the same; the next
// holder replaces the sidecar it left, and takes the scope without waiting.
//
// Errors:
//   - The scope is held and ctx ends first: a *BusyError naming scope.lock
//     and the holder's pid as far as it is known, with Owner set to the data
//     dir the holder serves when scope.owner.json can be read and names the
//     holder's pid, where that is known, and not a process provably gone.
//     ctx is as for Lock: errors.Is for ErrBusy and ctx.Err(), one attempt
//     when already done, never the scope once it ends.
//   - A filesystem without working locks: ErrLockingUnsupported, naming
//     scope.lock in scopeDir.
//   - An empty scopeDir or dataDir, a scopeDir that is not a directory, a
//     symlink, a directory or another non-regular file at scope.lock or
//     scope.owner.json: an error naming the path. Nothing is held then.
//
// docs/scope.md says how a server also owns its data dir, and in which
// order; examples/scope is a server built on it.
func AcquireScope(ctx context.Context, scopeDir, dataDir string) (release func(), err error) {
	if scopeDir == "" {
		return nil, errorf("AcquireScope: the scope dir is empty")
	}
	if dataDir == "" {
		return nil, errorf("AcquireScope %s: the data dir is empty", scopeDir)
	}
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	if err := ensureDir(scopeDir); err != nil {
		return nil, err
	}
	lockPath := filepath.Join(scopeDir, scopeLockName)
	live := ctx.Err() == nil
	l, err := waitLock(ctx, lockPath, filelock.Exclusive, 0o644, inspectScopeLock)
	if err != nil {
		var be *BusyError
		if errors.As(err, &be) {
			be.Owner = holderDataDir(scopeDir, be.PID)
		}
		return nil, err
	}
	self := Self()
	if err := writeIdentity(l, self); err != nil {
		l.Release()
		return nil, err
	}
	prev, prevState, _ := readScopeOwner(scopeDir)
	data, err := protocolLine(ScopeOwner{DataDir: dataDir, PID: self.PID, Process: self})
	if err == nil {
		err = public(durable.Write(scopeDir, scopeOwnerName, data))
	}
	if errors.Is(err, ErrNotDurable) {
		// The sidecar is in place; it is a hint that names this holder,
		// and a power loss ends the holder with it: not worth refusing.
		logger().Info("runnerstate: the scope owner record is in place but its directory could not be synced", "path", filepath.Join(scopeDir, scopeOwnerName), "err", err)
		err = nil
	}
	if err != nil {
		l.WriteContent(nil)
		l.Release()
		return nil, err
	}
	switch ownerPath := filepath.Join(scopeDir, scopeOwnerName); prevState {
	case fileOK:
		if !sameProcess(prev.Process, self) {
			logger().Info("runnerstate: replaced the scope owner record a previous holder left",
				"path", ownerPath, "pid", prev.PID, "data_dir", prev.DataDir)
		}
	case fileCorrupt:
		logger().Info("runnerstate: replaced an unreadable scope owner record", "path", ownerPath)
	}
	h := &scopeHold{dir: scopeDir, lock: l, self: self}
	if err := keepIfLive(ctx, live, lockPath, h.release); err != nil {
		return nil, err
	}
	return h.release, nil
}

// scopeHold is this process's hold on a scope, from AcquireScope.
type scopeHold struct {
	dir  string
	lock *filelock.File
	self Identity
	once sync.Once
}

// release removes the sidecar while the lock is still held, then clears the
// lock file's identity and frees the lock. When the lock file was replaced
// under it, the sidecar there may be another holder's, so it is left alone.
func (h *scopeHold) release() {
	h.once.Do(func() {
		err := filelock.LetGo(h.lock, func() error {
			if cur, state, _ := readScopeOwner(h.dir); state == fileOK && sameProcess(cur.Process, h.self) {
				return public(durable.Remove(h.dir, scopeOwnerName))
			}
			return nil
		})
		if err != nil {
			logger().Info("runnerstate: could not remove the scope owner record", "path", filepath.Join(h.dir, scopeOwnerName), "err", err)
		}
	})
}

// ReadScopeOwner returns the ScopeOwner recorded in scopeDir/scope.owner.json,
// and false when the file is absent, cannot be read (a symlink, a directory,
// larger than 1 MiB), is not a JSON object or names no data_dir. An
// unreadable or unparsable file is logged once. It locks nothing, creates
// nothing and writes nothing.
//
// The answer is a hint (see ScopeOwner): it does not say whether the owner
// still runs. A refusal from AcquireScope already carries the owner's data
// dir in BusyError.Owner.
func ReadScopeOwner(scopeDir string) (ScopeOwner, bool) {
	owner, state, err := readScopeOwner(scopeDir)
	if state == fileCorrupt {
		path := filepath.Join(scopeDir, scopeOwnerName)
		infoOnce("scope-owner:"+path, "runnerstate: the scope owner record cannot be read and is ignored", "path", path, "err", err)
	}
	return owner, state == fileOK
}

func readScopeOwner(scopeDir string) (ScopeOwner, fileState, error) {
	return readState(filepath.Join(scopeDir, scopeOwnerName), parseScopeOwner)
}

// parseScopeOwner parses scope.owner.json: a JSON object naming a data dir.
func parseScopeOwner(data []byte) (ScopeOwner, error) {
	var owner ScopeOwner
	if err := durable.DecodeObject(data, &owner); err != nil {
		return ScopeOwner{}, err
	}
	if owner.DataDir == "" {
		return ScopeOwner{}, errors.New("names no data_dir")
	}
	if owner.PID != 0 && !liveness.ValidPID(owner.PID) {
		return ScopeOwner{}, errors.New("names no valid pid")
	}
	return owner, nil
}

// holderDataDir is the data dir a refused AcquireScope names: the sidecar's,
// unless it names another pid than the holder's (holder, when known: 0 when
// not) or a process that is provably gone. That happens for
// an instant when a holder was killed and its successor holds the lock but
// has not yet replaced the sidecar; naming the dead holder's data dir then
// would be wrong. Anything that cannot be proven gone is trusted as a name.
func holderDataDir(scopeDir string, holder int) string {
	owner, ok := ReadScopeOwner(scopeDir)
	if !ok || holder > 0 && owner.PID != 0 && owner.PID != holder {
		return "" // not the holder's: left by a previous one, or forged
	}
	switch v, _ := liveness.Check(liveness.Identity(owner.Process)); v {
	case liveness.Dead, liveness.Stale:
		return ""
	}
	return owner.DataDir
}

// inspectScope is inspectLock for the scope lock in scopeDir. Where the lock
// file carries no identity (Windows, whose locked files cannot be read), the
// holder is named from the sidecar instead, and only when its identity is
// verified alive.
func inspectScope(scopeDir string) lockState {
	st := inspectLock(filepath.Join(scopeDir, scopeLockName))
	if st.err != nil || st.occupancy() != occUnverified || !st.silent || filelock.ListsHolders() {
		return st
	}
	owner, state, _ := readScopeOwner(scopeDir)
	if state != fileOK || owner.PID != owner.Process.PID {
		return st
	}
	if v, _ := liveness.Check(liveness.Identity(owner.Process)); v == liveness.Alive || v == liveness.Self {
		st.pid, st.verified, st.holder, st.named, st.verdict = owner.PID, true, owner.Process, true, v
	}
	return st
}

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
	for attempt := 0; ; attempt++ {
		if err := ensureDir(root); err != nil {
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
		if isNotExist(err) && attempt < maxRecreated {
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
	for attempt := 0; ; attempt++ {
		if err := ensureDir(root); err != nil {
			return nil, err
		}
		l, err := filelock.TryLock(path, filelock.Exclusive, 0o644)
		switch {
		case err == nil:
			return l.Release, nil
		case errors.Is(err, filelock.ErrWouldBlock):
			return nil, syncBusy(path)
		case isNotExist(err) && attempt < maxRecreated:
			continue // root was removed under us: make it again
		}
		return nil, syncUnknown(root, path, public(err))
	}
}

// syncBusy is NoSyncRunning's answer when the mark is held: the holders the
// kernel lists (Linux), told apart as syncs (shared) and resets (exclusive).
func syncBusy(path string) error {
	be := &BusyError{Path: path}
	holders, _, _ := filelock.Holders(path)
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

func pidList(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	if len(pids) == 1 {
		return "pid " + s[0]
	}
	return "pids " + strings.Join(s, ", ")
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

func (e *multiError) Error() string   { return e.msg }
func (e *multiError) Unwrap() []error { return e.errs }
