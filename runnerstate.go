// Package runnerstate coordinates a single runner process per data directory
// on one machine: exactly one process works the directory at a time, and the
// process that starts a runner, the runner itself and the next runner that
// takes over hand the directory between them without ever overlapping,
// without signalling the wrong process, and without losing or tearing state.
//
// # Index by concern
//
//   - The runner directory: Acquire, Running, ClearStale, StalePIDs, Status
//     and Report; LockName, RecordName, RestartName; ExitBusy; SetLogger.
//   - Takeover and standby: Takeover with TakeoverOptions (DefaultGrace,
//     DefaultKillAfter), ErrSuperseded; Standby with StandbyOptions and
//     StandbyResult.
//   - Starting a runner from a client: Start with StartOptions; StartError,
//     ErrStartFailed; Record.Ready and Report.Starting.
//   - Restart requests: RequestRestart, RestartRequested, ClearRestart,
//     WatchRestart; RestartDrain, RestartNow; ErrBadMode.
//   - Records and state files: Identity and Self, Record and Publish,
//     ErrNotHolder; SaveLines, LoadLines, AppendLine, MigrateFile.
//   - Kernel locks on any file: Lock, TryLock, RLock, TryRLock; BusyError,
//     ErrBusy, ErrLockingUnsupported.
//   - One server per scope, and the sync mark: AcquireScope, ScopeOwner,
//     ReadScopeOwner; SyncRunning, NoSyncRunning; ErrSyncRunning,
//     ErrSyncUnknown.
//
// # Authority and hints
//
// The kernel lock (flock(2) on runner.lock) is the only authority: held while
// the runner lives, dropped by the kernel the instant it dies, however it
// died. Everything else in the directory is a hint that names the holder. A
// pid read from a file is never proof of life: a process is "verified" only
// when its pid, start ticks, boot id, PID namespace and machine all match a
// live one, and only a verified process is ever signalled, through a pidfd
// that pins it. A hold is two kernel locks, runner.lock and tree.lock, which
// Inherit lends to the runner's jobs so that they keep the directory busy;
// what each promise rests on, and what is not promised, is in
// [docs/guarantees.md].
//
// The files runnerstate keeps in a runner directory, a scope directory
// (AcquireScope) and a data root (SyncRunning), each with its purpose, mode
// and writer, are listed once, in [docs/protocol.md], the specification of
// a runner directory: the format of each file, the protocol number it
// carries, and the order in which it is written. State files are written
// atomically, and no path is followed through a symlink.
//
// # Waits and errors
//
// Every wait takes a context.Context, and a call that waits never succeeds
// once its context has ended (see Lock). Every busy answer is a *BusyError
// that names the holder. Errors name the path they are about and say what to
// do; callers match them with errors.Is against the sentinels (ErrBusy,
// ErrNotHolder, ...) and errors.As against *BusyError. Every function that
// takes a directory refuses the empty name "" (pass "." for the current
// directory); those without an error answer (StalePIDs, RestartRequested,
// WatchRestart) treat it as a directory with nothing in it.
//
// Linux is first-class; macOS and Windows degrade as [docs/guarantees.md]
// says, and a system without file locks (js, wasip1, plan9) builds and
// answers ErrLockingUnsupported at run time.
//
// [docs/protocol.md]: https://github.com/runnerstate/runnerstate/blob/main/docs/protocol.md
// [docs/guarantees.md]: https://github.com/runnerstate/runnerstate/blob/main/docs/guarantees.md
package runnerstate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/hold"
	"github.com/runnerstate/runnerstate/internal/holder"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// The files of a runner directory.
const (
	LockName    = "runner.lock"  // the kernel lock, with the holder's identity in it
	RecordName  = "runner.json"  // the holder's published Record
	RestartName = "restart.json" // a pending restart request
)

// Internal files of a runner directory.
const (
	gateName      = "gate.json"   // the takeover gate's waiting starters
	treeLockName  = "tree.lock"   // the tree lock, the other of a hold's pair, which Inherit hands on
	stateLockName = ".state.lock" // the state lock, serialising state writes
	corruptSuffix = ".corrupt"    // an unreadable state file set aside by a fresh holder: <name>.corrupt-<time>, the 10 newest kept
)

// ExitBusy is the exit code the examples use when they are refused because
// another runner holds the directory: EX_TEMPFAIL from BSD's sysexits.h, "try
// again later".
const ExitBusy = 75

// ErrNewerProtocol reports a runner directory written under a protocol newer
// than this build knows (docs/protocol.md): the calls that write or admit
// refuse it rather than guess, with an error naming both protocol numbers;
// Running and Status report it. Upgrade this program, or let the newer
// build's runner go first.
var ErrNewerProtocol = errors.New("runnerstate: the runner directory was written under a newer protocol than this build knows")

// Logging.

var loggerPtr atomic.Pointer[slog.Logger]

// SetLogger sets the package's logger, which every call whose options have
// no Logger of their own uses. A logger set here gets everything at the
// levels its handler enables: what the package did (Info: a runner started,
// a takeover's restart request and signals, a stale record cleared) and its
// warnings. nil restores the default, which is quiet: warnings only (Warn
// and above), to slog.Default() as it is when each is logged. Nothing below
// Warn is logged unless a logger is set here or in the call's options
// (TakeoverOptions, StartOptions, StandbyOptions). Safe for concurrent use.
//
// The warnings are kept for what an operator must act on:
//   - a corrupt state file set aside as <name>.corrupt-<time>, or one that
//     could not be set aside; a directory where runner.json belongs;
//   - a runner lock other users can read, whose mode this process may not
//     change (chown it to the runner's user, or chmod it 0600);
//   - a record left by a runner of another machine or PID namespace, cleared
//     without signalling it;
//   - this runner lost its lock file (something deletes or replaces files in
//     the directory);
//   - a takeover that could not signal the runner or an orphan, or had to
//     send SIGKILL (it outlived SIGTERM by KillAfter); a previous runner that
//     released the directory but has not exited; descriptors of other
//     processes that could not be read (an orphan may be missed);
//   - a sync mark that cannot be taken (the sync runs unmarked, and resets
//     are refused until it is fixed);
//   - a service manager that could not be told READY=1;
//   - a runner told to go whose record could not be marked leaving (Start
//     may hand it out as ready until it goes: see why the state lock or
//     runner.json cannot be written);
//   - WatchRestart given an empty directory name.
//
// Everything else is Info, or Debug (a holder a takeover could not pin).
// What a caller can act on is in the error or in
// Status's Report; what a client meets in passing and cannot act on (an
// unreadable restart request, gate or scope owner record, which the next
// writer replaces), and a file the protocol does without when it cannot be
// written, removed or synced (start.json, a withdrawal from gate.json, a
// release's clean-up, which the next holder does), is said only to a logger
// the caller set.
func SetLogger(l *slog.Logger) { loggerPtr.Store(l) }

// logger is the package's logger: the one SetLogger set, else
// slog.Default() behind warningsOnly.
func logger() *slog.Logger {
	if l := loggerPtr.Load(); l != nil {
		return l
	}
	return slog.New(warningsOnly{slog.Default().Handler()})
}

// warningsOnly is the default logger's handler: the handler it wraps, given
// only records at Warn and above. A library says what it did only to a
// logger its caller gave it.
type warningsOnly struct{ slog.Handler }

func (h warningsOnly) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn && h.Handler.Enabled(ctx, level)
}

func (h warningsOnly) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h warningsOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warningsOnly{h.Handler.WithAttrs(attrs)}
}

func (h warningsOnly) WithGroup(name string) slog.Handler {
	return warningsOnly{h.Handler.WithGroup(name)}
}

// warnOnce logs a warning once per key for the life of the process, so that a
// corrupt file that every probe reads is reported once, not on every probe.
// The memory is bounded: past maxWarned keys it starts afresh.
func warnOnce(key, msg string, args ...any) {
	if firstTime(key) {
		logger().Warn(msg, args...)
	}
}

// infoOnce is warnOnce at Info: a problem a client meets in passing, and
// cannot act on, is said once, and only to a logger the caller set.
func infoOnce(key, msg string, args ...any) {
	if firstTime(key) {
		logger().Info(msg, args...)
	}
}

// firstTime reports whether key has not been seen before, and records it;
// at most maxWarned keys are kept (then the set starts again, and a problem
// is said once more).
func firstTime(key string) bool {
	warned.Lock()
	defer warned.Unlock()
	if _, ok := warned.keys[key]; ok {
		return false
	}
	if len(warned.keys) >= maxWarned {
		clear(warned.keys)
	}
	warned.keys[key] = struct{}{}
	return true
}

const maxWarned = 1024

var warned = struct {
	sync.Mutex
	keys map[string]struct{}
}{keys: make(map[string]struct{})}

// The directory.

// ensureDir creates dir (0755, parents too) when it does not exist and checks
// it is a directory.
func ensureDir(dir string) error { return public(durable.EnsureDir(dir)) }

// ensureRunnerDir is ensureDir for a runner about to be admitted: it also
// refuses, before anything is written in dir, a lock or gate file that
// cannot be one (a directory, a symlink, anything but a regular file), so
// that a refused start leaves no file behind.
func ensureRunnerDir(dir string) error {
	if err := ensureDir(dir); err != nil {
		return err
	}
	return public(durable.CheckEntries(dir, LockName, treeLockName, stateLockName, gateName))
}

// This process's holds.

// holds are the runner directories this process holds (Acquire, Takeover):
// Publish, Inherit, WatchRestart, Takeover's re-entry check and a busy
// answer that names this very process (inspectRunnerLock) reach a hold
// through it, by the directory's identity or, once the directory is gone,
// by its path.
var holds hold.Index

// holdOf returns this process's hold on dir, or nil.
func holdOf(dir string) *hold.Hold { return holds.Of(dir) }

// newHold is a hold of dir by self through p, not yet in holds. A hold is
// two kernel locks: runner.lock, and tree.lock, which Inherit hands on to
// the runner's children so that the directory stays busy while they live.
func newHold(dir string, p pair, self Identity) (*hold.Hold, error) {
	h, err := hold.New(dir, p.runner, p.tree, liveness.Identity(self), runnerFiles{})
	return h, public(err)
}

// runnerFiles is what a hold writes into a runner directory and clears
// from it (hold.Files).
type runnerFiles struct{}

// Stamp writes h's identity, and l's descriptor, into l.
func (runnerFiles) Stamp(h *hold.Hold, l *filelock.File) error {
	return writeIdentity(l, Identity(h.Self()))
}

// Stamped reports whether data names h and l's descriptor.
func (runnerFiles) Stamped(h *hold.Hold, l *filelock.File, data []byte) bool {
	lc, ok := parseLockLine(data)
	return ok && sameProcess(lc.Identity, Identity(h.Self())) && lc.FD == int(l.Fd())
}

// Tidy removes runner.json and retires a restart request addressed to this
// runner, under the state lock, before the locks are freed. After a lost
// runner.lock, runner.json is removed only while it still names this
// process.
func (runnerFiles) Tidy(h *hold.Hold, runnerHere bool) {
	self := Identity(h.Self())
	if !runnerHere {
		removeOwnRecord(h.Dir(), self)
		return
	}
	err := withStateLock(h.Dir(), func() error {
		var err error
		if rec, state, _ := readRecord(h.Dir()); state == fileOK && sameProcess(rec.Process, self) {
			err = public(durable.Remove(h.Dir(), RecordName)) // synced only when it removed something
		}
		retireOnRelease(h.Dir(), self.Instance)
		return err
	})
	if err != nil {
		logger().Info("runnerstate: release could not clean up", "dir", h.Dir(), "err", err)
	}
}

// pair is the two kernel locks of a hold.
type pair struct{ runner, tree *filelock.File }

func (p pair) release() {
	if p.tree != nil {
		p.tree.Release()
	}
	if p.runner != nil {
		p.runner.Release()
	}
}

// errTreeBusy says runner.lock was free but tree.lock is not: a previous
// runner's tree still lives (orphans), or a runner whose runner.lock was
// lost still holds its pair's other lock.
var errTreeBusy = errors.New("tree lock is held")

// withoutTreeLock makes a hold one lock, runner.lock alone, without
// tree.lock: set only by BenchmarkAcquire, to price the second lock.
var withoutTreeLock bool

// tryPair takes both locks of dir without waiting, runner.lock first, then
// tree.lock: a *BusyError naming the holder when runner.lock is held, and
// errTreeBusy (with runner.lock let go again) when only tree.lock is.
func tryPair(dir string) (pair, error) {
	runner, err := tryRunnerLock(filepath.Join(dir, LockName))
	if err != nil {
		return pair{}, busyIfHeld(dir, err)
	}
	if err := crossCheck(runner); err != nil {
		runner.Release()
		return pair{}, err
	}
	if withoutTreeLock {
		return pair{runner: runner}, nil
	}
	tree, err := tryOwnLock(filepath.Join(dir, treeLockName))
	if err != nil {
		runner.Release()
		return pair{}, err
	}
	return pair{runner, tree}, nil
}

// crossCheck refuses the runner lock l, just taken, when it is proven not
// to exclude, whatever the filesystem claims to be: the identity in it is
// another holder's, who holds it at the same time through another mount
// (holder.Shared). The error is ErrLockingUnsupported naming that holder.
// Anything short of proof admits.
func crossCheck(l *filelock.File) error {
	pid, holderPath, shared := holder.Shared(l, maxLockContent, parseHolder)
	if !shared {
		return nil
	}
	dir := filepath.Dir(l.Path())
	// The refusal is the error, which names all of this: said only to a
	// logger the caller set.
	logger().Info("runnerstate: refused a runner lock that does not exclude: another process holds it through another mount",
		"path", l.Path(), "pid", pid, "holder_path", holderPath, "filesystem", fsinfo.TypeOf(dir))
	return public(filelock.NotExcluding(l.Path(), fsinfo.TypeOf(dir), pid, holderPath))
}

// busyIfHeld answers a lock file this process may not open (another user's)
// as the probes would: busy when a runner holds dir (errTreeBusy when only
// tree.lock is held), so that the answer is "a runner runs", not
// "permission denied"; any other err as it is.
func busyIfHeld(dir string, err error) error {
	if !errors.Is(err, fs.ErrPermission) {
		return err
	}
	st := inspectRunner(dir)
	if st.err != nil {
		return err
	}
	switch occ := st.occupancy(); {
	case occ.held():
		return busyError(filepath.Join(dir, LockName), nil, inspectRunnerLock)
	case occ == occOrphans:
		return errTreeBusy
	}
	return err
}

// tryOwnLock is filelock.TryExclusive on a lock file private to the runner (0600):
// it answers errTreeBusy when held.
func tryOwnLock(path string) (*filelock.File, error) {
	l, err := filelock.TryExclusive(path)
	if errors.Is(err, filelock.ErrWouldBlock) {
		return nil, errTreeBusy
	}
	return l, public(err)
}

// Acquire takes dir's runner lock without waiting, creating dir (0755) and
// runner.lock (0600: a shared lock taken by anyone who could read it would
// refuse every runner) when they do not exist. On success this process is the
// one runner of dir: its Identity is written into runner.lock, a stale
// runner.json left by a previous runner is removed (an unreadable one is set
// aside as runner.json.corrupt-<time> and logged once), and a restart request is
// retired when it was addressed to another runner or made before this call; a
// request made while this call ran is kept for this runner.
//
// A hold is two kernel locks: runner.lock and tree.lock, which Inherit hands
// on to the runner's children. The directory is free only when both are: a
// previous runner's children that still hold tree.lock (orphans, once that
// runner is gone) keep it busy, and so does a runner whose runner.lock was
// deleted or replaced while it held it.
//
// release removes runner.json, clears the identity in both lock files,
// retires a restart request addressed to this runner, closes the descriptors
// Inherit handed out, then frees tree.lock and last runner.lock; it is
// idempotent. The lock files themselves are never removed. A process that
// dies without calling release loses its locks at once all the same (the
// kernel drops them, except where children inherited tree.lock), and the next
// Acquire clears what it left.
//
// Errors: a *BusyError naming the holder when the directory is held (by
// another process, by this one through an earlier Acquire, or by orphans or
// a runner whose runner.lock was lost: then PID is one of them); its Path is
// runner.lock's. ErrLockingUnsupported on a filesystem without locks; an
// error naming the path when dir is not a directory, or a lock file
// (runner.lock, tree.lock, or .state.lock, which serialises state writes)
// is a symlink, a directory, another non-regular file or not writable.
// ErrNewerProtocol (wrapped, naming the file and both protocol numbers) when one of dir's files says a protocol newer than this build's (docs/protocol.md): nothing is taken or written.
func Acquire(dir string) (release func(), err error) {
	if err := checkDir("Acquire", dir); err != nil {
		return nil, err
	}
	if err := checkProtocol(dir, true); err != nil {
		return nil, err
	}
	h, err := acquire(dir, time.Now())
	if err != nil {
		return nil, err
	}
	return h.Release, nil
}

// acquire is Acquire for a call that began at since: a restart request made
// since then is kept for the new runner.
func acquire(dir string, since time.Time) (*hold.Hold, error) {
	if err := ensureRunnerDir(dir); err != nil {
		return nil, err
	}
	p, err := tryPair(dir)
	if err == errTreeBusy {
		return nil, treeBusyError(dir, nil)
	}
	if err != nil {
		return nil, err
	}
	h, err := newHold(dir, p, Self())
	if err == nil {
		err = stamp(h)
	}
	if err != nil {
		p.release()
		return nil, err
	}
	// Clearing what a previous runner left is best effort: those files are
	// hints, and the kernel locks are already this process's. But a state
	// lock that can never be taken (a directory, a symlink or a FIFO where
	// .state.lock belongs) would leave the previous runner's record in place
	// and fail every Publish: that is refused, as Takeover refuses it.
	err = withStateLock(dir, func() error { settleIn(dir, Identity(h.Self()), since); return nil })
	if unusablePath(err) {
		for _, l := range h.Locks() {
			l.WriteContent(nil)
		}
		p.release()
		return nil, err
	}
	if err != nil {
		logger().Info("runnerstate: could not clear the previous runner's files", "dir", dir, "err", err)
	}
	holds.Add(h)
	return h, nil
}

// unusablePath reports whether err refuses a path that no retry can use
// until it is moved away: a symlink, a directory or another non-regular
// file where a regular file belongs.
func unusablePath(err error) bool { return durable.Unusable(err) }

// stamp writes the identity of h, just taken, and each lock's descriptor,
// into both lock files, and makes them private.
func stamp(h *hold.Hold) error {
	for _, l := range h.Locks() {
		if err := writeIdentity(l, Identity(h.Self())); err != nil {
			return err
		}
		makePrivate(l)
	}
	return nil
}

// tryRunnerLock makes a non-blocking attempt on a runner lock, creating it
// 0600 (see filelock.TryExclusive): a *BusyError naming the holder when it is held.
func tryRunnerLock(lockPath string) (*filelock.File, error) {
	l, err := filelock.TryExclusive(lockPath)
	if errors.Is(err, filelock.ErrWouldBlock) {
		return nil, busyError(lockPath, nil, inspectRunnerLock)
	}
	return l, public(err)
}

// writeIdentity writes self into the runner lock l, which this process holds.
func writeIdentity(l *filelock.File, self Identity) error {
	line, err := protocolLine(lockContent{Identity: self, FD: int(l.Fd())})
	if err != nil {
		return err
	}
	return public(l.WriteContent(line))
}

// makePrivate takes group and others' permissions off a runner lock this
// process just took, when it has any (it was made by touch, flock(1) or a
// restore): any user who can read runner.lock can take a shared lock on it
// and refuse every runner. When the file is another user's and cannot be
// changed, a warning says so and what to do.
func makePrivate(l *filelock.File) {
	mode, err := l.MakePrivate()
	switch {
	case err != nil:
		warnOnce("private:"+l.Path(), "runnerstate: the runner lock is readable by other users, who can block every runner with a shared lock, and this process may not change its mode; chown it to the runner's user or chmod it 0600",
			"path", l.Path(), "mode", fmt.Sprintf("%04o", mode), "err", durable.Unwrap(err))
	case mode != 0:
		logger().Info("runnerstate: made the runner lock private (0600): other users could block every runner with a shared lock on it", "path", l.Path(), "was", fmt.Sprintf("%04o", mode))
	}
}

// settleIn clears what a previous runner of dir left, for self, its new
// holder, admitted by a call that began at since: a record that is not
// self's, and a restart request not meant for self. Called under dir's state
// lock, holding the runner lock. Failures are logged.
func settleIn(dir string, self Identity, since time.Time) {
	clearStaleRecord(dir, self)
	retireOnAdmission(dir, self, since)
}

// clearStaleRecord removes a runner.json that is not self's, and sets aside
// one that cannot be read. Called only while holding the runner lock. It
// returns the stale pid, whether anything was cleared, and why a stale
// record is still there (also logged: Acquire's clearing is best effort).
func clearStaleRecord(dir string, self Identity) (int, bool, error) {
	path := filepath.Join(dir, RecordName)
	rec, state, err := readRecord(dir)
	switch state {
	case fileAbsent:
		return 0, false, nil
	case fileOK:
		if sameProcess(rec.Process, self) {
			return 0, false, nil
		}
		v, why := liveness.Check(liveness.Identity(rec.Process))
		if rec.Process.PID == 0 { // a bare pid, or a forged record: Check saw no pid at all
			why = fmt.Sprintf("the record names pid %d but no process identity, so it proves nothing", rec.PID)
		}
		// Not synced: a record a power loss brings back is as stale as
		// before (it names a process nothing trusts) and the next Acquire
		// clears it again, so an fsync would only slow every admission
		// after a crash.
		if err := os.Remove(path); err != nil && !isNotExist(err) {
			logger().Info("runnerstate: could not remove a stale record", "path", path, "err", err)
			return rec.PID, false, pathError("remove", path, durable.Unwrap(err))
		}
		args := []any{"path", path, "pid", rec.PID, "verdict", v.String(), "why", why}
		if v == liveness.Foreign || v == liveness.OtherNamespace {
			logger().Warn("runnerstate: cleared a record left by a runner of another machine or PID namespace; it was not signalled", args...)
		} else {
			logger().Info("runnerstate: cleared a stale record", args...)
		}
		return rec.PID, true, nil
	}
	// Corrupt: unreadable, unparsable, a symlink, a directory.
	if errors.Is(err, durable.ErrIsDir) {
		warnOnce("dir:"+path, "runnerstate: a directory stands where the runner record belongs; Publish will fail until it is moved", "path", path)
		return 0, false, nil
	}
	if err := setAside(dir, RecordName, "runner record", err); err != nil {
		return 0, false, err
	}
	return 0, true, nil
}

// Running reports whether a runner holds dir's lock now, and who. The kernel
// decides: a free lock means not running, whatever the files say; a held one
// means running. The Record is returned only when runner.json names the
// process that holds the lock and its identity is confirmed alive; otherwise
// the Record carries only PID: runner.lock's pid when the kernel confirms that
// process holds the lock, else the pid the kernel names, else 0.
//
// Running is a read-only probe: it creates nothing, writes nothing, and never
// makes a concurrent Acquire fail. The answer may be stale by the time it is
// used. Cost, on Linux: against a holder that published its record (Publish,
// or Takeover's admission), a stat of runner.lock and a read of runner.json
// and of the holder's /proc/<pid>/fdinfo/<fd>, whatever else the machine does:
// it opens no file that carries a lock and makes no flock call, so it never
// waits behind a process reading /proc/locks (which holds the kernel's lock
// table still, and every flock call and every close of a locked file waits
// for it). Where that cannot confirm the holder (no record yet, another
// user's process, a holder in another PID namespace), it reads runner.lock
// and the kernel's lock list, and those can wait behind such a reader.
//
// Errors: an error naming the path when runner.lock is a symlink or a
// directory, or cannot be read; a missing dir is simply not running.
// ErrLockingUnsupported on a filesystem whose locks do not exclude (see
// ErrLockingUnsupported), where a free lock proves nothing; a runner that
// holds runner.lock through another mount of the same file is reported
// running. A held directory whose runner.json says a protocol newer than
// this build's (docs/protocol.md) is reported running, with only the
// holder's pid (what the record's fields mean is not known here) and an
// error wrapping ErrNewerProtocol naming both protocol numbers.
func Running(dir string) (Record, bool, error) {
	if err := checkDir("Running", dir); err != nil {
		return Record{}, false, err
	}
	if err := filelock.Judge(filepath.Join(dir, LockName)); err != nil {
		return Record{}, false, public(err) // a lock that cannot exclude says nothing
	}
	st := inspectRunner(dir)
	if st.err != nil {
		return Record{}, false, st.err
	}
	if !st.occupancy().held() {
		return Record{}, false, nil
	}
	sr, state, _ := readStoredRecord(dir)
	if state == fileOK && newer(sr.protocol) {
		// What its fields mean is not known here: only the pid is said.
		return Record{PID: st.pid}, true, newerProtocolError(filepath.Join(dir, RecordName), sr.protocol)
	}
	return holderRecord(st, sr.Record, state), true, nil
}

// holderRecord is the Record to report for a held lock: the published one
// when it names the process the kernel says holds the lock and that identity
// is verified alive, else only the holder's pid.
func holderRecord(st lockState, rec Record, state fileState) Record {
	if st.occupancy().verified() && state == fileOK && rec.PID == st.pid && sameProcess(rec.Process, st.holder) {
		return rec
	}
	return Record{PID: st.pid}
}

// ClearStale clears what a previous runner left in dir (runner.json, and the
// identity in runner.lock, plus a restart request addressed to it), but only
// while holding dir's runner lock, which it takes without waiting and releases
// before returning. It returns the stale pid (runner.json's when readable,
// else runner.lock's) and whether anything was cleared. The lock file stays in
// place. A missing dir has nothing to clear.
//
// Errors: when the lock is held, the holder's pid and a *BusyError (errors.Is
// ErrBusy and, on Unix, syscall.EWOULDBLOCK); when something stale cannot be
// cleared (runner.json cannot be removed, a lock file cannot be read or
// rewritten), the first such error, naming its path, with the stale pid and
// whatever else could be cleared; otherwise the errors of Acquire
// (ErrNewerProtocol among them, before anything is cleared). A nil error
// means nothing stale is left.
func ClearStale(dir string) (pid int, cleared bool, err error) {
	if err := checkDir("ClearStale", dir); err != nil {
		return 0, false, err
	}
	if fi, err := os.Stat(dir); err != nil {
		if isNotExist(err) {
			return 0, false, nil
		}
		return 0, false, pathError("stat", dir, durable.Unwrap(err))
	} else if !fi.IsDir() {
		return 0, false, pathError("refusing", dir, durable.ErrNotDir)
	}
	if err := checkProtocol(dir, true); err != nil {
		return 0, false, err
	}
	p, err := tryPair(dir)
	if err == errTreeBusy {
		err = treeBusyError(dir, nil)
	}
	var be *BusyError
	if errors.As(err, &be) {
		return be.PID, false, be
	}
	if err != nil {
		return 0, false, err
	}
	defer p.release()
	l := p.runner
	content, readErr := l.ReadContent(maxLockContent)
	lockID, lockOK := parseLockContent(content)
	// Everything that can be cleared is; the first failure is the answer.
	err = withStateLock(dir, func() error {
		var rerr, qerr error
		pid, cleared, rerr = clearStaleRecord(dir, Identity{})
		retired, qerr := retireOnClear(dir)
		cleared = cleared || retired
		return cmp.Or(rerr, qerr)
	})
	if readErr != nil {
		err = cmp.Or(err, public(readErr)) // what it names is unknown: left as it is
	} else if len(content) > 0 {
		if werr := l.WriteContent(nil); werr != nil {
			err = cmp.Or(err, public(werr))
		} else {
			cleared = true
		}
	}
	err = cmp.Or(err, public(p.tree.WriteContent(nil)))
	if pid == 0 && lockOK {
		pid = lockID.PID
	}
	return pid, cleared, err
}

// maxLockContent bounds what is read of a lock file: one identity line.
const maxLockContent = 4096

// StalePIDs returns the pids named in dir's runner.lock and runner.json,
// deduplicated, lock file's first. They are bare pids read from files, for a
// starter to note before its child clears them; they prove nothing, and a
// caller must verify an identity before acting on one. It locks nothing and
// creates nothing.
func StalePIDs(dir string) []int {
	if dir == "" {
		return nil
	}
	var pids []int
	add := func(pid int) {
		if pid > 0 && !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	if id, ok := lockFileNames(dir); ok {
		add(id.PID)
	}
	if rec, state, _ := readRecord(dir); state == fileOK {
		add(rec.PID)
	}
	return pids
}

// lockFileNames is the identity dir's runner.lock names, read as a hint:
// without a lock, and proving nothing.
func lockFileNames(dir string) (Identity, bool) {
	data, err := readFile(filepath.Join(dir, LockName), maxLockContent)
	if err != nil {
		return Identity{}, false
	}
	return parseLockContent(data)
}

// stalePIDs are the pids dir's files name that are provably not its live
// holder: with the lock free, all of them; with it held, those of a verified
// holder's predecessors, and those whose process is provably gone. A pid
// that may be the holder (seen from another PID namespace, say) is never
// listed.
func stalePIDs(dir string, st lockState) []int {
	if st.via == viaRecordLock {
		// runner.json names the verified holder, which wrote its identity
		// into runner.lock when it took the lock, before any runner.json of
		// its own: neither file names a predecessor, and runner.lock, which
		// carries the lock, is left unopened (see holder.InspectPair).
		return nil
	}
	var stale []int
	named := map[int]Identity{}
	if id, ok := lockFileNames(dir); ok {
		named[id.PID] = id
	}
	if rec, state, _ := readRecord(dir); state == fileOK {
		if _, ok := named[rec.PID]; !ok {
			named[rec.PID] = rec.Process
		}
	}
	occ := st.occupancy()
	for _, pid := range StalePIDs(dir) {
		switch {
		case !occ.held():
		case occ.verified() && pid == st.pid:
			continue
		case occ.verified():
		default:
			if v, _ := liveness.Check(liveness.Identity(named[pid])); v != liveness.Dead && v != liveness.Stale {
				continue
			}
		}
		stale = append(stale, pid)
	}
	return stale
}

// Report is everything an operator needs to know about a runner directory,
// from Status. Scripts parse its JSON; the field names are stable.
type Report struct {
	Dir      string     `json:"dir"`             // the directory, made absolute
	Held     bool       `json:"held"`            // a runner holds the directory: its runner.lock, or its tree.lock when its lock file was lost
	Holder   Record     `json:"holder,omitzero"` // as Running reports it: the full record only when verified; omitted when none is known
	Verified bool       `json:"verified"`        // the holder's identity is confirmed alive
	Verdict  string     `json:"verdict,omitempty"`
	Restart  string     `json:"restart"`  // the pending restart mode, or ""
	Waiting  []Identity `json:"waiting"`  // live starters waiting in Takeover, oldest first
	Stale    []int      `json:"stale"`    // pids named in files that are not the live holder
	Orphans  []int      `json:"orphans"`  // processes of a gone runner's tree that still hold its tree lock
	Warnings []string   `json:"warnings"` // anything odd: corrupt files, foreign holders
	// Filesystem is the type of the directory's filesystem as mountinfo
	// names it (ext4, tmpfs, fuse.bindfs, nfs4...; macOS f_fstypename), or
	// omitted when it cannot be read.
	Filesystem string `json:"filesystem,omitempty"`
	// Starting is the process a Start is starting, while it lives and is
	// not yet ready (its Instance is empty: it is read before the process
	// picks one). Omitted when no start is in progress.
	Starting Identity `json:"starting,omitzero"`
}

// Status reports dir's state: whether a runner holds the lock and who it is,
// the pending restart request, the starters waiting to take over, the stale
// pids the files still name, the orphans of a previous runner's tree, the
// process a Start is starting (Starting, read from start.json), and
// warnings about anything odd. Like Running it creates nothing, modifies
// nothing and never makes an Acquire fail. Naming orphans scans every
// process's descriptors (only while a tree lock is held without a runner).
//
// On Linux, a holder of runner.lock that holds no tree.lock for longer
// than a short settle time (200 ms, which this call then waits) predates
// the tree lock (v0.1, below protocol 1's floor): a warning says so, and
// that its jobs are not tracked. That look reads the kernel's lock list
// only when the holder was not confirmed from runner.json and its fdinfo.
//
// Verdict, when the lock file names a holder, is the liveness verdict of that
// identity: "self", "alive", "dead", "stale", "foreign", "other-namespace" or
// "unverifiable".
//
// Errors: an error naming the path when dir exists but cannot be read, or
// runner.lock is a symlink or a directory. A missing dir reports not held.
// On a filesystem whose locks do not exclude (see ErrLockingUnsupported)
// there is no error: the report says not held, with the verdict of the
// identity runner.lock names ("unverifiable" when none) and a warning naming
// the filesystem; Filesystem is set wherever it can be read. A state file
// (runner.json, restart.json, gate.json, start.json) that says a protocol
// newer than this build's (docs/protocol.md) is no error either: Status
// reports what it can read, and a warning naming the file and both
// protocol numbers, which errors.Is cannot match: the calls that write or
// admit refuse such a directory with ErrNewerProtocol.
func Status(dir string) (Report, error) {
	r := Report{Dir: dir, Waiting: []Identity{}, Stale: []int{}, Orphans: []int{}, Warnings: []string{}}
	if err := checkDir("Status", dir); err != nil {
		return r, err
	}
	if abs, err := filepath.Abs(dir); err == nil {
		r.Dir = abs
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		// Windows says a path below a file is not found, not ENOTDIR.
		return r, pathError("refusing", dir, durable.ErrNotDir)
	}
	r.Filesystem = fsinfo.TypeOf(dir)
	if err := filelock.Judge(filepath.Join(dir, LockName)); err != nil {
		return refusedStatus(r, dir, err), nil
	}
	st := inspectRunner(dir)
	if st.err != nil {
		return r, st.err
	}
	st.elsewhereToo(dir)
	occ := st.occupancy()
	r.Held = occ.held()
	r.Verified = occ.verified()
	if st.named {
		r.Verdict = st.verdict.String()
	}
	rec, recState, recErr := readRecord(dir)
	if occ.held() {
		r.Holder = holderRecord(st, rec, recState)
		r.Warnings = append(r.Warnings, st.warnings(filepath.Join(dir, LockName))...)
		if r.Verified {
			if stopped, state := liveness.Stopped(liveness.Identity(st.holder)); stopped {
				r.Warnings = append(r.Warnings, fmt.Sprintf("the runner, pid %d, is stopped (state %c: SIGSTOP, a terminal's Ctrl-Z or a debugger): it holds %s but serves nothing until it is continued (SIGCONT)", st.holder.PID, state, dir))
			}
		}
		if w := belowFloor(dir, st); w != "" {
			r.Warnings = append(r.Warnings, w)
		}
	}
	if occ == occOrphans {
		pids, complete := orphans(dir, 0)
		r.Orphans = append(r.Orphans, pids...)
		r.Warnings = append(r.Warnings, orphansWarning(dir, pids, complete))
	}
	if recState == fileCorrupt {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s cannot be read and is ignored: %v", filepath.Join(dir, RecordName), recErr))
	}
	r.Starting = pendingChild(dir, r.Holder)
	r.Stale = append(r.Stale, stalePIDs(dir, st)...)
	switch req, state, err := readRestartState(dir); {
	case state == fileOK && !req.void():
		r.Restart = req.Mode
	case state == fileCorrupt:
		r.Warnings = append(r.Warnings, fmt.Sprintf("%v; the request is ignored: remove it, or make a new one (RequestRestart)", err))
	}
	waiting, warn := waitingStarters(dir)
	r.Waiting = append(r.Waiting, waiting...)
	if warn != "" {
		r.Warnings = append(r.Warnings, warn)
	}
	if err := checkProtocol(dir, false); err != nil {
		r.Warnings = append(r.Warnings, err.Error()+"; what this report says of that file may be wrong")
	}
	r.Warnings = append(r.Warnings, dirWarnings(dir)...)
	return r, nil
}

// orphansWarning is Status's warning for a tree.lock held without a runner,
// by the orphans pids (complete: every process could be read).
func orphansWarning(dir string, pids []int, complete bool) string {
	switch {
	case len(pids) > 0:
		return fmt.Sprintf("no runner holds %s, but processes of a previous runner's tree (%s) still hold %s: the directory stays busy until they exit; Takeover signals them", dir, pidList(pids), filepath.Join(dir, treeLockName))
	case !complete:
		return fmt.Sprintf("no runner holds %s, but %s is held by processes this user cannot see: the directory stays busy until they exit", dir, filepath.Join(dir, treeLockName))
	}
	return fmt.Sprintf("no runner holds %s, but %s is held: the directory stays busy until its holders exit", dir, filepath.Join(dir, treeLockName))
}

// refusedStatus is Status on a filesystem whose locks do not exclude: the
// lock cannot tell whether a runner holds dir, so the report says not held
// and warns why; the verdict is that of the identity runner.lock names, or
// "unverifiable" when it names none.
func refusedStatus(r Report, dir string, refused error) Report {
	r.Verdict = liveness.Unverifiable.String()
	if id, ok := lockFileNames(dir); ok {
		v, _ := liveness.Check(liveness.Identity(id))
		r.Verdict = v.String()
	}
	why := durable.Unwrap(public(refused)).Error()
	r.Warnings = append(r.Warnings, "cannot tell whether a runner holds "+dir+": "+why)
	r.Warnings = append(r.Warnings, dirWarnings(dir)...)
	return r
}

// orphans lists the processes that hold dir's tree.lock, from a scan of every
// process's descriptors (see filelock.ScanHolders for its cost), leaving out
// except (the runner whose tree it is, when it still runs) and the starters
// waiting in Takeover (one takes tree.lock for an instant as it finds it
// free: never an orphan). complete is false when some processes could not
// be read.
func orphans(dir string, except int) (pids []int, complete bool) {
	ino, err := filelock.InodeOf(filepath.Join(dir, treeLockName))
	if err != nil {
		return nil, true
	}
	all, complete := filelock.ScanHolders(ino)
	waiting, _ := waitingStarters(dir)
	for _, pid := range all {
		if pid != except && !slices.ContainsFunc(waiting, func(s Identity) bool { return s.PID == pid }) {
			pids = append(pids, pid)
		}
	}
	return pids, complete
}

// treeBusyError is Acquire's refusal when only tree.lock is held: it names a
// runner whose runner.lock was lost, or else an orphan (Verified when its
// identity was confirmed and it holds the tree). cause is the context's
// error when a wait ended.
func treeBusyError(dir string, cause error) *BusyError {
	be := &BusyError{Path: filepath.Join(dir, LockName), cause: cause}
	st := inspectRunner(dir)
	if st.occupancy() == occLostFile {
		be.PID, be.Verified, be.lost = st.pid, true, true
		return be
	}
	be.Orphan = true
	pids, _ := orphans(dir, 0)
	if len(pids) > 0 {
		be.PID, be.orphans = pids[0], len(pids)
		if p := verifiedTreeHolder(dir, pids[0]); p != nil {
			be.Verified = true
			p.Close()
		}
	}
	return be
}

// verifiedTreeHolder pins pid when it is alive and holds dir's tree.lock,
// checked after the pin (holder.Pinned); else nil. The caller closes it.
func verifiedTreeHolder(dir string, pid int) *liveness.Process {
	return holder.Pinned(pid, filepath.Join(dir, treeLockName))
}

// dirWarnings reports what is odd about dir itself.
func dirWarnings(dir string) []string {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil
	}
	var warnings []string
	if durable.OpenToAll(fi) {
		warnings = append(warnings, fmt.Sprintf("%s is world-writable without the sticky bit: any user can replace the runner's files; chmod o-w or +t it", dir))
	}
	if err := durable.CheckEntries(dir, stateLockName); err != nil {
		warnings = append(warnings, fmt.Sprintf("%s %v: until it is, no runner is admitted and no state is written", filepath.Join(dir, stateLockName), durable.Unwrap(err)))
	}
	return warnings
}
