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
// The kernel lock (flock(2) on runner.lock) is the only authority: it is held
// while the runner lives, and the kernel drops it the instant the runner dies,
// however it died. Everything else in the directory is a hint that names the
// holder: runner.lock carries the holder's Identity, runner.json the Record it
// published. A pid read from a file is never taken as proof of life; a
// recorded process is "verified" only when its pid, start ticks, boot id, PID
// namespace and machine all match the live process, and only a verified
// process is ever signalled, through a pidfd that pins it.
//
// # Files in a runner directory
//
// The files runnerstate keeps in a runner directory, a scope directory
// (AcquireScope) and a data root (SyncRunning), each with its purpose, mode
// and writer, are listed once, in [docs/operations.md].
//
// State files are written atomically: a temporary file in the same
// directory, fsynced, renamed over the target, and the directory fsynced. No
// path is ever followed through a symlink.
//
// # The state lock
//
// Read-modify-write of the files above (an append, a restart request, the
// gate) is serialised across goroutines and processes by the directory's
// state lock: an exclusive flock(2) on .state.lock in the directory, held
// only for one small file write. A lock others take on the directory itself
// (flock(1)'s idiom, "flock DIR cmd") never touches it. A wait for it ends
// with the caller's context where there is one, and after 30 s in any case;
// a writer stopped (SIGSTOP) while holding it stalls the others until then.
//
// # The runner's tree
//
// A hold is two kernel locks, runner.lock and tree.lock, and the directory is
// free only when both are. Processes the runner starts through Inherit hold
// tree.lock too, by a descriptor they inherit, so a runner that dies leaves
// the directory busy while its jobs live on: orphans, which Acquire names,
// Status lists, Standby waits for and Takeover signals (each checked first to
// still hold the descriptor). A runner whose lock file is deleted, renamed or
// replaced while held still holds the other lock, which keeps the next
// runner out, and WatchRestart tells it RestartLost at once so that it can
// stop. A restart request whose Takeover starter died is void.
//
// # What is not promised
//
// What lies outside what the kernel lock can see (a job that leaves the
// tree, a lock file deleted while held, two machines on a trusted network
// filesystem, orphans on Windows and macOS) is listed in [docs/guarantees.md].
//
// # Waits
//
// Every wait takes a context.Context and every busy answer is a *BusyError
// that names the holder. Lock and RLock hand a released lock to a waiting
// process as fast as the kernel does (no polling). A call that waits never
// succeeds once its context has ended (see Lock).
//
// # Errors
//
// Errors name the path they are about and say what to do; callers match
// them with errors.Is against the sentinels (ErrBusy, ErrNotHolder, ...) and
// errors.As against *BusyError. Every function that takes a directory
// refuses the empty name "" (pass "." for the current directory); those
// without an error answer (StalePIDs, RestartRequested, WatchRestart) treat
// it as a directory with nothing in it.
//
// # Platforms
//
// Linux is first-class: holders are read from /proc/locks without touching
// the lock, identities are verified from /proc and pinned with pidfds. macOS
// and other Unix systems verify start times through sysctl and probe locks
// with a non-blocking shared lock. Windows locks through LockFileEx and
// verifies creation times, but cannot read a locked file's content, so the
// holder is named from runner.json only; SIGTERM does not exist there. A
// system without file locks (js, wasip1, plan9) builds, and every lock
// answers ErrLockingUnsupported at run time.
//
// [docs/operations.md]: https://github.com/runnerstate/runnerstate/blob/main/docs/operations.md
// [docs/guarantees.md]: https://github.com/runnerstate/runnerstate/blob/main/docs/guarantees.md
package runnerstate

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
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

// Logging.

var loggerPtr atomic.Pointer[slog.Logger]

// SetLogger sets where warnings go (a stale record cleared, a corrupt file set
// aside, a foreign holder seen). nil restores the default, slog.Default().
// Safe for concurrent use.
func SetLogger(l *slog.Logger) { loggerPtr.Store(l) }

func logger() *slog.Logger {
	if l := loggerPtr.Load(); l != nil {
		return l
	}
	return slog.Default()
}

// warnOnce logs a warning once per key for the life of the process, so that a
// corrupt file that every probe reads is reported once, not on every probe.
// The memory is bounded: past maxWarned keys it starts afresh.
func warnOnce(key, msg string, args ...any) {
	warned.Lock()
	if _, ok := warned.keys[key]; ok {
		warned.Unlock()
		return
	}
	if len(warned.keys) >= maxWarned {
		clear(warned.keys)
	}
	warned.keys[key] = struct{}{}
	warned.Unlock()
	logger().Warn(msg, args...)
}

const maxWarned = 1024

var warned = struct {
	sync.Mutex
	keys map[string]struct{}
}{keys: make(map[string]struct{})}

// Errors.

// errBadName refuses a state file name that is not a plain file name.
var errBadName = errors.New("is not a plain file name of its own")

// pathError names the operation and path. The operation carries the package
// name so that every message starts with it, and a system error says what to
// do (durable.Advise).
func pathError(op, path string, err error) error {
	if durable.IsNotDir(err) {
		return public(durable.NotDir(path)) // name the file that stands in the way
	}
	if d := denied(path, err); d != nil {
		return d
	}
	return &fs.PathError{Op: "runnerstate: " + op, Path: path, Err: durable.Advise(err)}
}

// denied is durable.Denied for a permission error on path: an error naming
// the directory this process may not enter, or nil.
func denied(path string, err error) error {
	if !errors.Is(err, fs.ErrPermission) {
		return nil
	}
	return durable.Denied("runnerstate: ", path, durable.Unwrap(err))
}

// errorf formats an error whose message starts with the package name.
func errorf(format string, args ...any) error {
	return fmt.Errorf("runnerstate: "+format, args...)
}

// public turns an error from an internal package into this package's
// vocabulary: the *fs.PathError it is gets an Op that names the package, so
// that every message starts with "runnerstate: ", a system error says what to
// do (durable.Advise), and a filesystem's refusal of locks becomes
// ErrLockingUnsupported. Anything else passes as it is.
func public(err error) error {
	pe, ok := err.(*fs.PathError)
	if !ok {
		return err
	}
	var ue *filelock.UnsupportedError
	if errors.As(pe.Err, &ue) {
		return &fs.PathError{Op: "runnerstate: lock", Path: pe.Path, Err: lockingUnsupported{ue.Err}}
	}
	if strings.HasPrefix(pe.Op, "runnerstate: ") {
		return err
	}
	if durable.IsNotDir(pe.Err) {
		return public(durable.NotDir(pe.Path)) // name the file that stands in the way
	}
	if d := denied(pe.Path, pe.Err); d != nil {
		return d
	}
	return &fs.PathError{Op: "runnerstate: " + pe.Op, Path: pe.Path, Err: durable.Advise(pe.Err)}
}

// lockingUnsupported is ErrLockingUnsupported for one path, with the
// system's answer (ENOLCK, EOPNOTSUPP...) as its cause: its message is the
// sentinel's without the package name, which the *fs.PathError around it
// already starts with.
type lockingUnsupported struct{ cause error }

func (e lockingUnsupported) Error() string {
	var fe *fsinfo.Error
	if errors.As(e.cause, &fe) {
		return notExcluding(fe)
	}
	return strings.TrimPrefix(ErrLockingUnsupported.Error(), "runnerstate: ") + " (" + e.cause.Error() + ")"
}

// notExcluding is the message of a lock refused on a filesystem whose locks
// do not exclude: what it is, and what to do.
func notExcluding(fe *fsinfo.Error) string {
	typ := cmp.Or(fe.Type, "unknown")
	advice := "use a directory on a local disk, or the etcd module to coordinate several machines"
	if fe.Holder > 0 {
		return fmt.Sprintf("locks on %s (%s) do not exclude: pid %d (verified alive) holds %s through another mount (%s) at the same time; %s",
			fe.Dir, typ, fe.Holder, LockName, fe.HolderPath, advice)
	}
	return fmt.Sprintf("%s is on %s, whose file locks do not exclude processes that reach it through another mount or another machine; %s, or, when every process reaches it through this one mount on this one machine, opt in with %s=%s (or TrustFilesystem)",
		fe.Dir, typ, advice, fsinfo.TrustEnv, typ)
}

func (e lockingUnsupported) Is(target error) bool { return target == ErrLockingUnsupported }
func (e lockingUnsupported) Unwrap() error        { return e.cause }

// isNotExist reports whether err says a path does not exist.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// checkDir refuses the empty directory name. "" would mean the current
// directory to the calls that join paths and an error to those that stat
// it, so it is the same clear error for all of them.
func checkDir(op, dir string) error {
	if dir == "" {
		return errorf("%s: the directory name is empty; name one (\".\" is the current directory)", op)
	}
	return nil
}

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
	for _, name := range []string{LockName, treeLockName, stateLockName, gateName} {
		p := filepath.Join(dir, name)
		if fi, err := os.Lstat(p); err == nil {
			if err := durable.CheckMode(p, fi.Mode()); err != nil {
				return public(err)
			}
		}
	}
	return nil
}

// This process's holds.

// hold is this process's hold on a runner directory, taken by Acquire or
// Takeover. (The holder is the process that has one, seen from outside.) A
// hold is two kernel locks: runner.lock, and tree.lock, which Inherit hands
// on to the runner's children so that the directory stays busy while they
// live.
type hold struct {
	dir        string
	abs        string // dir made absolute, to find the hold when dir is gone
	key        durable.Key
	lock       *filelock.File // runner.lock
	tree       *filelock.File // tree.lock
	self       Identity
	acquiredAt time.Time
	once       sync.Once

	mu        sync.Mutex
	inherited []*os.File // descriptors of tree.lock handed to children by Inherit
	released  bool
}

// The runner directories this process holds, keyed by the directory's device
// and inode so that two spellings of one directory are one key.
var holds = struct {
	sync.Mutex
	m map[durable.Key]*hold
}{m: make(map[durable.Key]*hold)}

// holdOf returns this process's hold on dir, or nil. A dir that is gone (the
// directory was removed or renamed under the hold) is found by its path.
func holdOf(dir string) *hold {
	key, kerr := durable.KeyOf(dir)
	abs, _ := filepath.Abs(dir)
	holds.Lock()
	defer holds.Unlock()
	if kerr == nil {
		if h := holds.m[key]; h != nil {
			return h
		}
	}
	for _, h := range holds.m {
		if h.abs == abs {
			return h
		}
	}
	return nil
}

// newHold is a hold of dir through p, not yet registered.
func newHold(dir string, p pair, self Identity) (*hold, error) {
	key, err := durable.KeyOf(dir)
	if err != nil {
		return nil, public(err)
	}
	abs, _ := filepath.Abs(dir)
	return &hold{dir: dir, abs: abs, key: key, lock: p.runner, tree: p.tree, self: self, acquiredAt: time.Now()}, nil
}

// register records h as this process's hold on its directory, for Publish.
func (h *hold) register() {
	holds.Lock()
	holds.m[h.key] = h
	holds.Unlock()
}

// pair is the two kernel locks of a hold.
type pair struct{ runner, tree *filelock.File }

// locks lists the hold's kernel locks: runner.lock, then tree.lock (absent
// only under withoutTreeLock).
func (h *hold) locks() []*filelock.File {
	if h.tree == nil {
		return []*filelock.File{h.lock}
	}
	return []*filelock.File{h.lock, h.tree}
}

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
// another holder's (see heldElsewhere), who holds it at the same time
// through another mount. The error is ErrLockingUnsupported naming that
// holder. Anything short of proof (no identity, a dead or unverifiable one,
// a descriptor that is closed, carries no lock, or is open on a file of this
// very filesystem, which the kernel would have excluded) admits.
func crossCheck(l *filelock.File) error {
	if !filelock.CarriesContent || l.Empty() {
		return nil // released cleanly: nobody is named
	}
	data, err := l.ReadContent(maxLockContent)
	if err != nil || len(data) == 0 {
		return nil
	}
	lc, ok := parseLockLine(data)
	if !ok {
		return nil
	}
	ours, err := filelock.InodeOf(l.Path())
	if err != nil {
		return nil
	}
	holderPath, held := heldElsewhere(lc.Identity, lc.FD, ours)
	if !held || !sameFileAs(l, lc.PID, lc.FD, data) {
		return nil
	}
	dir := filepath.Dir(l.Path())
	logger().Warn("runnerstate: refused a runner lock that does not exclude: another process holds it through another mount",
		"path", l.Path(), "pid", lc.PID, "holder_path", holderPath, "filesystem", fsinfo.TypeOf(dir))
	return public(filelock.NotExcluding(l.Path(), fsinfo.TypeOf(dir), lc.PID, holderPath))
}

// sameFileAs reports whether the lock file l, which this process holds, is
// the very file the descriptor fd of pid is open on, by a mark: random
// bytes, as long as what the file holds (old), written through l and read
// back through pid's descriptor. (As long, because a network or FUSE mount
// may still believe the file has its old length.) A copy of a runner
// directory made while its runner ran (cp -a to another disk) carries the
// same identity, but never shows the mark. old is written back in any case:
// it is the other holder's when the file is shared, and a caller
// (ClearStale) still reads it.
func sameFileAs(l *filelock.File, pid, fd int, old []byte) bool {
	mark := make([]byte, len(old))
	rand.Read(mark)
	for i := range mark {
		mark[i] = "0123456789abcdef"[mark[i]&15]
	}
	defer l.WriteContent(old)
	if l.WriteContent(mark) != nil {
		return false
	}
	seen, err := filelock.ReadThrough(pid, fd, len(mark))
	return err == nil && bytes.Equal(seen, mark)
}

// heldElsewhere reports whether id, verified alive, holds a runner lock
// through its descriptor fd on another mount than ours (the Inode of the
// lock file as this process sees it): that descriptor is open on a file
// named runner.lock of another device and carries an exclusive lock. The
// descriptor is read before the identity is verified (liveness.CheckHolder
// says why that order proves it is the holder). It returns the lock file's
// path as the holder sees it.
func heldElsewhere(id Identity, fd int, ours filelock.Inode) (holderPath string, held bool) {
	if fd < 0 || id.PID <= 0 {
		return "", false
	}
	_, held, _ = liveness.CheckHolder(liveness.Identity(id), func() bool {
		p, ino, locked := filelock.LockThrough(id.PID, fd)
		holderPath = p
		return locked == filelock.Yes && filepath.Base(p) == LockName && ino.Dev != ours.Dev
	})
	return holderPath, held
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
func Acquire(dir string) (release func(), err error) {
	if err := checkDir("Acquire", dir); err != nil {
		return nil, err
	}
	h, err := acquire(dir, time.Now())
	if err != nil {
		return nil, err
	}
	return h.release, nil
}

// acquire is Acquire for a call that began at since: a restart request made
// since then is kept for the new runner.
func acquire(dir string, since time.Time) (*hold, error) {
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
		err = h.writeIdentity()
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
	err = withStateLock(dir, func() error { settleIn(dir, h.self, since); return nil })
	if unusablePath(err) {
		for _, l := range h.locks() {
			l.WriteContent(nil)
		}
		p.release()
		return nil, err
	}
	if err != nil {
		logger().Warn("runnerstate: could not clear the previous runner's files", "dir", dir, "err", err)
	}
	h.register()
	return h, nil
}

// unusablePath reports whether err refuses a path that no retry can use
// until it is moved away: a symlink, a directory or another non-regular
// file where a regular file belongs.
func unusablePath(err error) bool {
	return errors.Is(err, durable.ErrSymlink) || errors.Is(err, durable.ErrIsDir) || errors.Is(err, durable.ErrNotRegular)
}

// writeIdentity writes this hold's identity, and each lock's descriptor,
// into both lock files, and makes them private.
func (h *hold) writeIdentity() error {
	for _, l := range h.locks() {
		if err := writeIdentity(l, h.self); err != nil {
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
	line, err := jsonLine(lockContent{Identity: self, FD: int(l.Fd())})
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
		// Not synced: a record a power loss brings back is as stale as
		// before (it names a process nothing trusts) and the next Acquire
		// clears it again, so an fsync would only slow every admission
		// after a crash.
		if err := os.Remove(path); err != nil && !isNotExist(err) {
			logger().Warn("runnerstate: could not remove a stale record", "path", path, "err", err)
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

// release gives the directory up: it removes runner.json and retires a
// restart request addressed to this runner, clears the identity in both lock
// files, closes what Inherit handed out, frees tree.lock, and last
// runner.lock. A lock file that was replaced under the hold is left as it is
// (what is at the path now is not this hold's); after a lost runner.lock,
// runner.json is removed only while it still names this process.
func (h *hold) release() {
	h.once.Do(func() {
		holds.Lock()
		if holds.m[h.key] == h {
			delete(holds.m, h.key)
		}
		holds.Unlock()
		runnerHere, _ := h.lock.AtPath()
		if runnerHere {
			if err := withStateLock(h.dir, h.cleanUp); err != nil {
				logger().Warn("runnerstate: release could not clean up", "dir", h.dir, "err", err)
			}
		} else {
			removeOwnRecord(h.dir, h.self) // runner.lock was lost: only a record that still names this process
		}
		h.mu.Lock()
		h.released = true
		for _, f := range h.inherited {
			f.Close()
		}
		h.inherited = nil
		h.mu.Unlock()
		if h.tree != nil {
			// Through the hold's own descriptor: what it clears is this
			// hold's file, wherever it is now.
			h.tree.WriteContent(nil)
			h.tree.Release()
		}
		if runnerHere {
			h.lock.WriteContent(nil)
		}
		h.lock.Release()
	})
}

// cleanUp removes what names this runner in its directory, under the state
// lock, before its locks are freed.
func (h *hold) cleanUp() error {
	var err error
	if rec, state, _ := readRecord(h.dir); state == fileOK && sameProcess(rec.Process, h.self) {
		err = public(durable.Remove(h.dir, RecordName)) // synced only when it removed something
	}
	retireOnRelease(h.dir, h.self.Instance)
	return err
}

// lost says whether the hold lost a lock file: one of its pair was deleted,
// renamed or replaced while held, or the directory is gone. why names which.
// Only proof counts: a lock file or directory that cannot be checked (its
// stat fails with EIO, EACCES...) is not lost.
func (h *hold) lost() (bool, string) {
	h.mu.Lock()
	released := h.released
	h.mu.Unlock()
	if released {
		return false, ""
	}
	if _, err := os.Stat(h.dir); isNotExist(err) {
		return true, h.dir + " is gone"
	}
	for _, l := range h.locks() {
		if ok, err := l.AtPath(); !ok && err == nil {
			return true, l.Path() + " was removed or replaced while held"
		}
	}
	return false, ""
}

// heal writes this hold's identity back into runner.lock when another
// program erased it (an O_TRUNC open, as Python's filelock makes before it
// tries a lock, or ": >"), so that the holder stays verifiable.
func (h *hold) heal() {
	for _, l := range h.locks() {
		if ok, _ := l.AtPath(); !ok {
			continue
		}
		data, err := l.ReadContent(maxLockContent)
		if err != nil {
			continue
		}
		if lc, ok := parseLockLine(data); ok && sameProcess(lc.Identity, h.self) && lc.FD == int(l.Fd()) {
			continue
		}
		if len(data) == 0 && l.Fd() == 0 {
			continue // Windows: the lock file carries nothing
		}
		writeIdentity(l, h.self)
	}
}

// letGo frees l, a lock this process holds on a file it wrote its identity
// into. While l is still the file at its path, cleanup first removes what
// names this process beside it (a record, a sidecar), then the identity is
// cleared, so that a successor never finds the lock free while a file still
// names this process. When the file was replaced under l, nothing at the
// path is this hold's, and only the lock is freed. cleanup's error is
// returned; the lock is freed in any case.
func letGo(l *filelock.File, cleanup func() error) error {
	defer l.Release()
	if ok, _ := l.AtPath(); !ok {
		return nil
	}
	err := cleanup()
	l.WriteContent(nil)
	return err
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
// running.
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
	rec, state, _ := readRecord(dir)
	return holderRecord(st, rec, state), true, nil
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
// whatever else could be cleared; otherwise the errors of Acquire. A nil
// error means nothing stale is left.
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
		if pid > 0 && !containsPID(pids, pid) {
			pids = append(pids, pid)
		}
	}
	if data, err := readFile(filepath.Join(dir, LockName), maxLockContent); err == nil {
		if id, ok := parseLockContent(data); ok {
			add(id.PID)
		}
	}
	if rec, state, _ := readRecord(dir); state == fileOK {
		add(rec.PID)
	}
	return pids
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
		// carries the lock, is left unopened (see confirmFromRecord).
		return nil
	}
	var stale []int
	named := map[int]Identity{}
	if lc, err := readFile(filepath.Join(dir, LockName), maxLockContent); err == nil {
		if id, ok := parseLockContent(lc); ok {
			named[id.PID] = id
		}
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

func containsPID(pids []int, pid int) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}

// Report is everything an operator needs to know about a runner directory,
// from Status. Scripts parse its JSON; the field names are stable.
type Report struct {
	Dir      string     `json:"dir"`             // the directory, made absolute
	Held     bool       `json:"held"`            // the kernel lock is held: a runner is running
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
// Verdict, when the lock file names a holder, is the liveness verdict of that
// identity: "self", "alive", "dead", "stale", "foreign", "other-namespace" or
// "unverifiable".
//
// Errors: an error naming the path when dir exists but cannot be read, or
// runner.lock is a symlink or a directory. A missing dir reports not held.
// On a filesystem whose locks do not exclude (see ErrLockingUnsupported)
// there is no error: the report says not held, with the verdict of the
// identity runner.lock names ("unverifiable" when none) and a warning naming
// the filesystem; Filesystem is set wherever it can be read.
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
	}
	if occ == occOrphans {
		pids, complete := orphans(dir, 0)
		r.Orphans = append(r.Orphans, pids...)
		switch {
		case len(pids) > 0:
			r.Warnings = append(r.Warnings, fmt.Sprintf("no runner holds %s, but processes of a previous runner's tree (%s) still hold %s: the directory stays busy until they exit; Takeover signals them", dir, pidList(pids), filepath.Join(dir, treeLockName)))
		case !complete:
			r.Warnings = append(r.Warnings, fmt.Sprintf("no runner holds %s, but %s is held by processes this user cannot see: the directory stays busy until they exit", dir, filepath.Join(dir, treeLockName)))
		default:
			r.Warnings = append(r.Warnings, fmt.Sprintf("no runner holds %s, but %s is held: the directory stays busy until its holders exit", dir, filepath.Join(dir, treeLockName)))
		}
	}
	if recState == fileCorrupt {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s cannot be read and is ignored: %v", filepath.Join(dir, RecordName), recErr))
	}
	r.Starting = startingOf(dir, r.Holder)
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
	r.Warnings = append(r.Warnings, dirWarnings(dir)...)
	return r, nil
}

// refusedStatus is Status on a filesystem whose locks do not exclude: the
// lock cannot tell whether a runner holds dir, so the report says not held
// and warns why; the verdict is that of the identity runner.lock names, or
// "unverifiable" when it names none.
func refusedStatus(r Report, dir string, refused error) Report {
	r.Verdict = liveness.Unverifiable.String()
	if data, err := readFile(filepath.Join(dir, LockName), maxLockContent); err == nil {
		if id, ok := parseLockContent(data); ok {
			v, _ := liveness.Check(liveness.Identity(id))
			r.Verdict = v.String()
		}
	}
	why := durable.Unwrap(public(refused)).Error()
	r.Warnings = append(r.Warnings, "cannot tell whether a runner holds "+dir+": "+why)
	r.Warnings = append(r.Warnings, dirWarnings(dir)...)
	return r
}

// lockState is what inspectLock learned about a lock file: whether it is
// held, and who holds it as far as that can be proven.
type lockState struct {
	held       bool             // someone holds the lock (kernel or probe)
	pid        int              // the holder's pid as far as it can be trusted, else 0
	verified   bool             // holder's identity is confirmed alive and it holds the lock
	holder     Identity         // who holds it: the verified identity, else the best name known
	named      bool             // holder names a process (from the lock file, runner.json or the kernel)
	verdict    liveness.Verdict // of holder, when named
	via        confirmation     // how a verified holder was confirmed
	fd         int              // the descriptor the lock file says its holder locked through
	silent     bool             // the lock file names nobody: empty, erased, unparsable, unreadable
	hidden     bool             // held by a process not visible from this PID namespace
	otherMount bool             // held through another mount of the lock file (elsewhere)
	lostFile   bool             // held through tree.lock only: runner.lock was lost under the holder
	treeHeld   bool             // runner.lock free, tree.lock held: orphans (or a holder not visible)
	reason     string           // why the holder is not verified
	notes      []string         // what else Status should say about the lock file
	err        error            // the lock path is unusable (symlink, directory...)
}

// occupancy is what a lockState says holds the lock, or the directory for
// inspectRunner: the one answer callers switch on. The facts that belong to
// each case are lockState's: pid, holder, verdict and reason for a holder;
// notes for Status; orphans are listed by orphans().
type occupancy uint8

const (
	occFree       occupancy = iota // nothing holds it
	occVerified                    // a holder whose identity is verified alive and holds the lock
	occUnverified                  // a holder that cannot be verified (pid when the kernel names it)
	occHidden                      // a holder not visible from this PID namespace: never named by pid, never signalled
	occOrphans                     // runner.lock free, tree.lock held: orphans of a previous runner's tree
	occLostFile                    // runner.lock lost under its runner, which still holds tree.lock (verified)
)

// String names the occupancy, for logs and test failures.
func (o occupancy) String() string {
	switch o {
	case occFree:
		return "free"
	case occVerified:
		return "verified holder"
	case occUnverified:
		return "unverified holder"
	case occHidden:
		return "hidden holder"
	case occOrphans:
		return "orphans"
	case occLostFile:
		return "lost lock file"
	}
	return fmt.Sprintf("occupancy(%d)", uint8(o))
}

// held reports whether a process holds the lock itself (or, for a lost lock
// file, the tree.lock that stands for it): every occupancy but free and
// orphans.
func (o occupancy) held() bool { return o != occFree && o != occOrphans }

// verified reports whether the holder's identity is verified alive: a
// verified holder, or the runner of a lost lock file.
func (o occupancy) verified() bool { return o == occVerified || o == occLostFile }

// occupancy is the answer st gives: the only place its flags are decoded.
// (A verified holder implies held, and so do hidden and lostFile; treeHeld
// implies runner.lock free; lostFile implies verified.)
func (st lockState) occupancy() occupancy {
	switch {
	case st.lostFile:
		return occLostFile
	case st.verified:
		return occVerified
	case st.hidden:
		return occHidden
	case st.held:
		return occUnverified
	case st.treeHeld:
		return occOrphans
	}
	return occFree
}

// namedHolder is the identity a held lock's holder is known by (the lock
// file's, runner.json's or the kernel's naming); ok is false when the lock is
// not held or names nobody.
func (st lockState) namedHolder() (id Identity, ok bool) {
	if !st.occupancy().held() || !st.named {
		return Identity{}, false
	}
	return st.holder, true
}

// confirmation is how a holder was verified.
type confirmation uint8

const (
	viaLockFile   confirmation = iota // the lock file's identity, held per the kernel
	viaRecord                         // runner.json's identity, the pid the kernel names
	viaRecordLock                     // runner.json's identity and lock descriptor, per its fdinfo
)

// warnings are what Status says about a held lock at lockPath.
func (st lockState) warnings(lockPath string) []string {
	w := append([]string(nil), st.notes...)
	switch {
	case st.hidden && st.verdict == liveness.OtherNamespace:
		w = append(w, fmt.Sprintf("%s is held by a process not visible from this PID namespace: the lock file names %s of another PID namespace; it is never signalled", lockPath, st.holder))
	case st.hidden:
		w = append(w, fmt.Sprintf("%s is held by a process not visible from this PID namespace; it is never signalled", lockPath))
	case st.verdict == liveness.Foreign:
		w = append(w, fmt.Sprintf("%s names a holder on another machine (%s); it is never signalled", lockPath, st.holder))
	case st.verdict == liveness.OtherNamespace:
		w = append(w, fmt.Sprintf("%s names a holder in another PID namespace (%s); it is never signalled", lockPath, st.holder))
	}
	if st.occupancy() == occUnverified {
		w = append(w, fmt.Sprintf("the holder of %s cannot be verified (%s)", lockPath, st.reason))
	}
	return w
}

// alive reports whether the holder's identity is verified alive.
func (st lockState) alive() bool {
	return st.verdict == liveness.Alive || st.verdict == liveness.Self
}

// name takes id as the holder's name and checks it.
func (st *lockState) name(id Identity) {
	var why string
	st.holder, st.named = id, true
	st.verdict, why = liveness.Check(liveness.Identity(id))
	st.reason = id.String() + ": " + st.verdict.String() + " (" + why + ")"
}

// inspectLock looks at a lock file without touching the lock: who holds it,
// and whether the identity written in it is that holder and alive. The
// answer comes from the cheapest reading that is exact:
//
//  1. the lock file names a live holder and the descriptor it locked
//     through, and /proc/<pid>/fdinfo/<fd> shows that lock: one small read,
//     whatever else the machine holds;
//  2. otherwise the kernel's lock list (/proc/locks), read whole (its cost
//     grows with every lock on the machine); when it lists no holder but
//     was read in several passes, which can miss an entry, a probe decides,
//     and a lock found held is named from the list read again;
//  3. in a child PID namespace, where the list leaves out processes outside
//     it, a lock it shows free is probed (a shared lock taken and dropped at
//     once), and one found held is held by a process not visible from here;
//  4. where the kernel lists no holders at all (not Linux), a probe.
//
// A shared lock counts as held too: it refuses Acquire as surely as an
// exclusive one (any user who can read the file can take one).
func inspectLock(path string) lockState {
	var st lockState
	ino, err := st.readContent(path)
	switch {
	case st.err != nil:
		return st
	case isNotExist(err):
		return lockState{}
	case err != nil:
		st.probe(path) // the kernel cannot be asked about this file; a probe says why
		return st
	}
	if st.confirmedVia(ino) {
		return st
	}
	holders, known := filelock.HoldersOf(ino)
	if !known {
		return st.probeThenName(path, ino)
	}
	st.fromHolders(holders)
	if !st.held && !filelock.SeesAllHolders() {
		st.probeHidden(path)
	}
	return st
}

// readContent reads the identity in the lock file at path and checks it. It
// sets st.err for a path that cannot be a lock file, and returns the file it
// read, or the error of finding one when it could not read it (the file
// does not exist, or cannot be read: then it is looked up by path).
func (st *lockState) readContent(path string) (filelock.Inode, error) {
	data, id, err := durable.ReadFileID(path, maxLockContent)
	switch {
	case isNotExist(err):
		return filelock.Inode{}, err
	case unusablePath(err):
		st.err = public(err)
		return filelock.Inode{}, nil
	case errors.Is(err, syscall.ENOTDIR):
		st.err = public(durable.NotDir(filepath.Dir(path)))
		return filelock.Inode{}, nil
	case errors.Is(err, fs.ErrPermission):
		st.reason, st.silent = "cannot read "+path+" (permission denied)", true
		return filelock.InodeOf(path)
	case err != nil && !errors.Is(err, durable.ErrTooLarge):
		st.reason, st.silent = "cannot read "+path+": "+durable.Unwrap(err).Error(), true
		return filelock.InodeOf(path)
	}
	ino := filelock.Inode{Dev: id.Dev, Ino: id.Ino}
	lc, err := lockLineMemo.Parse(data)
	if err != nil {
		st.reason, st.silent = path+" names no holder", true
		return ino, nil
	}
	st.holder, st.named, st.fd = lc.Identity, true, lc.FD
	return ino, nil
}

// confirmedVia is the exact, O(1) answer: the lock file names its holder and
// the descriptor it locked through, and /proc/<pid>/fdinfo/<fd> shows that
// lock, read before the holder's start identity (liveness.CheckHolder says
// why that order proves it is the holder). Otherwise it checks the named
// identity the ordinary way, for the slower readings to use.
func (st *lockState) confirmedVia(ino filelock.Inode) bool {
	if !st.named {
		return false
	}
	if st.fd > 0 {
		v, held, why := liveness.CheckHolder(liveness.Identity(st.holder), func() bool {
			return filelock.HeldVia(st.holder.PID, st.fd, ino) == filelock.Yes
		})
		if held {
			st.verdict, st.reason = v, st.holder.String()+": "+v.String()+" ("+why+")"
			st.held, st.pid, st.verified, st.via = true, st.holder.PID, true, viaLockFile
			return true
		}
	}
	st.name(st.holder)
	return false
}

// probeThenName decides by a probe where the kernel's list could not: it
// lists no holders at all (not Linux), or listed none in a read of several
// passes, which can miss an entry (see filelock.Holders). A lock found held
// is then named from the list, read again (lookAgain); where it still lists
// no holder, the probe's answer stands.
func (st *lockState) probeThenName(path string, ino filelock.Inode) lockState {
	unprobed := *st
	st.probe(path)
	if errors.Is(st.err, fs.ErrPermission) && filelock.ListsHolders() {
		// Another user's lock file, which this process may not open to
		// probe: the kernel's list, read again, is the evidence left.
		unprobed.fromHolders(lookAgain(ino))
		return unprobed
	}
	if st.err != nil || !st.held || !filelock.ListsHolders() {
		return *st
	}
	if holders := lookAgain(ino); len(holders) > 0 {
		unprobed.fromHolders(holders)
		return unprobed
	}
	return *st
}

// lookAgain reads the kernel's lock list again, up to five times, for a lock
// a probe found held while a read in several passes listed no holder: most
// likely a pass missed the entry. It returns the first holders listed.
func lookAgain(ino filelock.Inode) []filelock.Holder {
	for range 5 {
		if holders, _ := filelock.HoldersOf(ino); len(holders) > 0 {
			return holders
		}
	}
	return nil
}

// fromHolders decides from the kernel's holders: held when any matches the
// file, verified when the identity in it is alive and holds it exclusively.
func (st *lockState) fromHolders(holders []filelock.Holder) {
	var firstPID int
	for _, h := range holders {
		if st.named && h.PID == st.holder.PID {
			st.held, st.pid = true, h.PID
			st.verified = st.alive() && h.Exclusive
			if st.verified {
				return
			}
			continue
		}
		if h.DevMatch {
			st.held = true
			if firstPID == 0 || h.Exclusive {
				firstPID = h.PID
			}
		}
	}
	if st.pid == 0 {
		st.pid = firstPID
	}
	if st.held && st.named && !st.verified {
		st.reason = fmt.Sprintf("the kernel names pid %d as the holder, not the lock file's %s", st.pid, st.holder)
	}
}

// probe decides by taking and dropping a shared lock, where the kernel lists
// no holders.
func (st *lockState) probe(path string) {
	held, err := filelock.ProbeHeld(path)
	if err != nil {
		st.err = public(err)
		return
	}
	st.held = held
	if held && st.alive() {
		st.pid, st.verified = st.holder.PID, true
	}
}

// probeHidden probes a lock the kernel's list shows free from a child PID
// namespace, where the list leaves out processes outside it. Held means held
// by a process this one cannot see, and so can neither name by pid nor
// signal: the lock file's identity, if any, is from its own namespace.
func (st *lockState) probeHidden(path string) {
	held, err := filelock.ProbeHeld(path)
	if err != nil || !held {
		return
	}
	st.held, st.hidden, st.pid = true, true, 0
	st.reason = "held by a process not visible from this PID namespace"
}

// inspectRunner is inspectLock for dir's runner lock, which runner.json can
// also name: when the lock file names nobody and the kernel could not
// confirm the holder (runner.lock cannot be read, as by another user, whom
// its 0600 keeps out, and who may not read that process's descriptors
// either; it was erased; or, on Windows, a locked file cannot be read at
// all), runner.json's identity is trusted when it is verified alive and is
// the pid the kernel names (or, where the kernel names none, when the lock
// is held).
//
// When runner.lock is free, tree.lock tells the rest: held by the live
// runner it names (through the descriptor it recorded), that runner lost
// its runner.lock and still runs (lostFile); held otherwise, a previous
// runner's children still live (treeHeld: orphans).
func inspectRunner(dir string) lockState {
	if st, ok := confirmFromRecord(dir); ok {
		return st
	}
	st := inspectLock(filepath.Join(dir, LockName))
	if st.err != nil {
		return st
	}
	if !st.held && st.named {
		st.elsewhere(dir)
	}
	if !st.held {
		return inspectTree(dir, st)
	}
	if st.occupancy() != occUnverified || !st.silent {
		return st
	}
	rec, state, _ := readRecord(dir)
	if state != fileOK || (st.pid != 0 && rec.PID != st.pid) || (st.pid == 0 && filelock.ListsHolders()) {
		return st
	}
	why := st.reason
	saved := st
	st.name(rec.Process)
	if !st.alive() {
		return saved
	}
	st.pid, st.verified, st.via = rec.PID, true, viaRecord
	if filelock.CarriesContent { // elsewhere runner.json is how a holder is always named
		st.notes = append(st.notes, fmt.Sprintf("%s; the holder was named from %s", why, RecordName))
	}
	return st
}

// elsewhere makes a runner lock that looks free held when the identity in
// it holds it through another mount (heldElsewhere): the kernel excludes
// nothing between the two mounts, but a runner runs, and a probe never says
// otherwise. Status also asks it of a lock found held, for its warning (the
// kernel may have matched the holder by inode number alone).
func (st *lockState) elsewhere(dir string) {
	path := filepath.Join(dir, LockName)
	ours, err := filelock.InodeOf(path)
	if err != nil {
		return
	}
	holderPath, held := heldElsewhere(st.holder, st.fd, ours)
	if !held {
		return
	}
	st.held, st.pid, st.verified, st.via, st.otherMount = true, st.holder.PID, true, viaLockFile, true
	st.notes = append(st.notes, fmt.Sprintf("%s is held by pid %d through another mount (%s): file locks on %s do not exclude between the two, so no runner can be admitted here safely; use one path on a local disk",
		path, st.holder.PID, holderPath, cmp.Or(fsinfo.TypeOf(dir), "this filesystem")))
}

// elsewhereToo is elsewhere for Status, asked of a lock found held whose
// named holder was not already found through another mount, for its warning
// (the kernel may have matched the holder by inode number alone); only
// where the lock file carries content.
func (st *lockState) elsewhereToo(dir string) {
	if _, ok := st.namedHolder(); ok && !st.otherMount && filelock.CarriesContent {
		st.elsewhere(dir)
	}
}

// confirmFromRecord is the probe that touches no lock: runner.json names the
// holder and the descriptor it locks runner.lock through (Record.LockFD),
// and /proc/<pid>/fdinfo/<fd> shows that process's exclusive lock on the
// file now at runner.lock, read before its start identity (see
// liveness.CheckHolder for why that order proves it holds it).
//
// It opens no file that carries a lock and makes no flock call: only a stat
// of runner.lock, a read of runner.json (replaced whole on every write, so
// never locked) and the one fdinfo file. That matters beside a process that
// reads /proc/locks (lslocks, a monitoring agent): every such read takes the
// kernel's lock table for writing, and the close of any descriptor on a file
// with a flock on it (fs/locks.c locks_remove_flock) waits for it, however
// many locks the machine holds. ok is false wherever this cannot confirm the
// holder (no runner.json, or one from a runner not holding now; another
// user's process; a symlink or a directory at runner.lock), and inspectLock
// decides as before.
func confirmFromRecord(dir string) (st lockState, ok bool) {
	rec, state, _ := readRecord(dir)
	if state != fileOK || rec.LockFD <= 0 || rec.PID <= 0 || rec.PID != rec.Process.PID {
		return lockState{}, false
	}
	ino, err := filelock.InodeOf(filepath.Join(dir, LockName))
	if err != nil {
		return lockState{}, false
	}
	v, held, why := liveness.CheckHolder(liveness.Identity(rec.Process), func() bool {
		return filelock.HeldVia(rec.PID, rec.LockFD, ino) == filelock.Yes
	})
	if !held {
		return lockState{}, false
	}
	return lockState{
		held: true, pid: rec.PID, verified: true, holder: rec.Process, named: true,
		verdict: v, via: viaRecordLock, fd: rec.LockFD,
		reason: rec.Process.String() + ": " + v.String() + " (" + why + ")",
	}, true
}

// inspectTree looks at tree.lock for a directory whose runner.lock (st) is
// free.
func inspectTree(dir string, st lockState) lockState {
	tree := inspectLock(filepath.Join(dir, treeLockName))
	switch {
	case tree.err != nil:
		st.err = tree.err
	case tree.verified && tree.alive():
		tree.lostFile = true
		tree.notes = append(tree.notes, fmt.Sprintf("%s was lost (deleted, renamed or replaced while held): its holder still runs and holds %s", filepath.Join(dir, LockName), filepath.Join(dir, treeLockName)))
		return tree
	case tree.held:
		st.treeHeld = true
	}
	return st
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
		if pid != except && !isWaiting(waiting, pid) {
			pids = append(pids, pid)
		}
	}
	return pids, complete
}

func isWaiting(starters []Identity, pid int) bool {
	for _, s := range starters {
		if s.PID == pid {
			return true
		}
	}
	return false
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
// checked after the pin (so the pinned process is the holder); else nil.
// The caller closes it.
func verifiedTreeHolder(dir string, pid int) *liveness.Process {
	id, err := liveness.Lookup(pid)
	if err != nil {
		return nil
	}
	p, _, _ := liveness.Pin(id)
	if p == nil {
		return nil
	}
	ino, err := filelock.InodeOf(filepath.Join(dir, treeLockName))
	if err != nil || filelock.HeldBy(pid, ino) != filelock.Yes {
		p.Close()
		return nil
	}
	return p
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
	state := filepath.Join(dir, stateLockName)
	if fi, err := os.Lstat(state); err == nil {
		if err := durable.CheckMode(state, fi.Mode()); err != nil {
			warnings = append(warnings, fmt.Sprintf("%s %v: until it is, no runner is admitted and no state is written", state, durable.Unwrap(err)))
		}
	}
	return warnings
}
