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
//	runner.lock   the kernel lock; one line, the holder's Identity as JSON.
//	              Never unlinked; its content is cleared on release.
//	runner.json   the Record the holder published (Publish); removed on release.
//	restart.json  a pending restart request (RequestRestart).
//	gate.json     the takeover gate: waiting starters (Takeover, Status).
//	.state.lock   the state lock (below).
//
// A scope directory (AcquireScope) holds scope.lock and scope.owner.json; a
// data root (SyncRunning, NoSyncRunning) holds sync.lock.
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
// # What is not promised
//
// The lock file must not be deleted while held: a runner whose runner.lock is
// unlinked keeps its lock on the unlinked file, so the next Acquire locks a
// new file and two runners run (Publish notices and fails with ErrNotHolder).
// Only the runner's own process is ever signalled, never its process group or
// children: a runner that starts job processes must stop them itself. A
// restart request left by a starter that is then killed still reaches the
// runner.
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
package runnerstate

import (
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
	stateLockName = ".state.lock" // the state lock, serialising state writes
	corruptSuffix = ".corrupt"    // an unreadable state file set aside by a fresh holder
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
// name so that every message starts with it.
func pathError(op, path string, err error) error {
	return &fs.PathError{Op: "runnerstate: " + op, Path: path, Err: err}
}

// errorf formats an error whose message starts with the package name.
func errorf(format string, args ...any) error {
	return fmt.Errorf("runnerstate: "+format, args...)
}

// public turns an error from an internal package into this package's
// vocabulary: the *fs.PathError it is gets an Op that names the package, so
// that every message starts with "runnerstate: ", and a filesystem's refusal
// of locks becomes ErrLockingUnsupported. Anything else passes as it is.
func public(err error) error {
	pe, ok := err.(*fs.PathError)
	if !ok {
		return err
	}
	var ue *filelock.UnsupportedError
	if errors.As(pe.Err, &ue) {
		return fmt.Errorf("runnerstate: lock %s: %w (%w)", pe.Path, ErrLockingUnsupported, ue.Err)
	}
	if strings.HasPrefix(pe.Op, "runnerstate: ") {
		return err
	}
	return &fs.PathError{Op: "runnerstate: " + pe.Op, Path: pe.Path, Err: pe.Err}
}

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

// This process's holds.

// hold is this process's hold on a runner directory, taken by Acquire or
// Takeover. (The holder is the process that has one, seen from outside.)
type hold struct {
	dir        string
	key        durable.Key
	lock       *filelock.File
	self       Identity
	acquiredAt time.Time
	once       sync.Once
}

// The runner directories this process holds, keyed by the directory's device
// and inode so that two spellings of one directory are one key.
var holds = struct {
	sync.Mutex
	m map[durable.Key]*hold
}{m: make(map[durable.Key]*hold)}

// holdOf returns this process's hold on dir, or nil.
func holdOf(dir string) *hold {
	key, err := durable.KeyOf(dir)
	if err != nil {
		return nil
	}
	holds.Lock()
	defer holds.Unlock()
	return holds.m[key]
}

// newHold is a hold of dir through l, not yet registered.
func newHold(dir string, l *filelock.File, self Identity) (*hold, error) {
	key, err := durable.KeyOf(dir)
	if err != nil {
		return nil, public(err)
	}
	return &hold{dir: dir, key: key, lock: l, self: self, acquiredAt: time.Now()}, nil
}

// register records h as this process's hold on its directory, for Publish.
func (h *hold) register() {
	holds.Lock()
	holds.m[h.key] = h
	holds.Unlock()
}

// Acquire takes dir's runner lock without waiting, creating dir (0755) and
// runner.lock (0600: a shared lock taken by anyone who could read it would
// refuse every runner) when they do not exist. On success this process is the
// one runner of dir: its Identity is written into runner.lock, a stale
// runner.json left by a previous runner is removed (an unreadable one is set
// aside as runner.json.corrupt and logged once), and a restart request is
// retired when it was addressed to another runner or made before this call; a
// request made while this call ran is kept for this runner.
//
// release removes runner.json, clears runner.lock's content, retires a
// restart request addressed to this runner and frees the lock; it is
// idempotent. The lock file itself is never removed. A process that dies
// without calling release loses the lock at once all the same (the kernel
// drops it), and the next Acquire clears what it left.
//
// Errors: a *BusyError naming the holder when the lock is held (by another
// process, or by this one through an earlier Acquire); ErrLockingUnsupported
// on a filesystem without locks; an error naming the path when dir is not a
// directory, or runner.lock is a symlink, a directory or not writable.
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
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	l, err := tryRunnerLock(filepath.Join(dir, LockName))
	if err != nil {
		return nil, err
	}
	h, err := newHold(dir, l, Self())
	if err == nil {
		err = writeIdentity(l, h.self)
	}
	if err != nil {
		l.Release()
		return nil, err
	}
	// Clearing what a previous runner left is best effort: those files are
	// hints, and the kernel lock is already this process's.
	if err := withStateLock(dir, func() error { settleIn(dir, h.self, since); return nil }); err != nil {
		logger().Warn("runnerstate: could not clear the previous runner's files", "dir", dir, "err", err)
	}
	h.register()
	return h, nil
}

// tryRunnerLock makes a non-blocking attempt on a runner lock, creating it
// 0600: a *BusyError naming the holder when it is held. Where lock holders
// can only be probed, a probe holds a shared lock for an instant, so a busy
// answer is tried again for a few milliseconds.
func tryRunnerLock(lockPath string) (*filelock.File, error) {
	l, err := filelock.TryLock(lockPath, filelock.Exclusive, 0o600)
	for try := 0; errors.Is(err, filelock.ErrWouldBlock) && !filelock.ListsHolders() && try < 5; try++ {
		time.Sleep(time.Millisecond)
		l, err = filelock.TryLock(lockPath, filelock.Exclusive, 0o600)
	}
	if errors.Is(err, filelock.ErrWouldBlock) {
		return nil, busyError(lockPath, nil)
	}
	return l, public(err)
}

// writeIdentity writes self into the runner lock l, which this process holds.
func writeIdentity(l *filelock.File, self Identity) error {
	line, err := jsonLine(self)
	if err != nil {
		return err
	}
	return public(l.WriteContent(line))
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
// returns the stale pid and whether anything was cleared.
func clearStaleRecord(dir string, self Identity) (int, bool) {
	path := filepath.Join(dir, RecordName)
	rec, state, err := readRecord(dir)
	switch state {
	case fileAbsent:
		return 0, false
	case fileOK:
		if sameProcess(rec.Process, self) {
			return 0, false
		}
		v, why := liveness.Check(liveness.Identity(rec.Process))
		if err := os.Remove(path); err != nil && !isNotExist(err) {
			logger().Warn("runnerstate: could not remove a stale record", "path", path, "err", err)
			return rec.PID, false
		}
		args := []any{"path", path, "pid", rec.PID, "verdict", v.String(), "why", why}
		if v == liveness.Foreign || v == liveness.OtherNamespace {
			logger().Warn("runnerstate: cleared a record left by a runner of another machine or PID namespace; it was not signalled", args...)
		} else {
			logger().Info("runnerstate: cleared a stale record", args...)
		}
		return rec.PID, true
	}
	// Corrupt: unreadable, unparsable, a symlink, a directory.
	if errors.Is(err, durable.ErrIsDir) {
		warnOnce("dir:"+path, "runnerstate: a directory stands where the runner record belongs; Publish will fail until it is moved", "path", path)
		return 0, false
	}
	return 0, setAside(dir, RecordName, "runner record", err)
}

// release gives the directory up: it removes runner.json, retires a restart
// request addressed to this runner, clears the identity in runner.lock and
// frees the lock.
func (h *hold) release() {
	h.once.Do(func() {
		holds.Lock()
		if holds.m[h.key] == h {
			delete(holds.m, h.key)
		}
		holds.Unlock()
		err := letGo(h.lock, func() error {
			return withStateLock(h.dir, func() error {
				if rec, state, _ := readRecord(h.dir); state == fileOK && sameProcess(rec.Process, h.self) {
					if err := os.Remove(filepath.Join(h.dir, RecordName)); err != nil && !isNotExist(err) {
						return pathError("remove", filepath.Join(h.dir, RecordName), durable.Unwrap(err))
					}
				}
				retireOnRelease(h.dir, h.self.Instance)
				return public(durable.SyncDir(h.dir))
			})
		})
		if err != nil {
			logger().Warn("runnerstate: release could not clean up", "dir", h.dir, "err", err)
		}
	})
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
// makes a concurrent Acquire fail (on Linux it reads /proc/locks instead of
// touching the lock). The answer may be stale by the time it is used.
//
// Errors: an error naming the path when runner.lock is a symlink or a
// directory, or cannot be read; a missing dir is simply not running.
func Running(dir string) (Record, bool, error) {
	if err := checkDir("Running", dir); err != nil {
		return Record{}, false, err
	}
	st := inspectRunner(dir)
	if st.err != nil {
		return Record{}, false, st.err
	}
	if !st.held {
		return Record{}, false, nil
	}
	rec, state, _ := readRecord(dir)
	return holderRecord(st, rec, state), true, nil
}

// holderRecord is the Record to report for a held lock: the published one
// when it names the process the kernel says holds the lock and that identity
// is verified alive, else only the holder's pid.
func holderRecord(st lockState, rec Record, state fileState) Record {
	if st.verified && state == fileOK && rec.PID == st.pid && sameProcess(rec.Process, st.content) {
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
// ErrBusy and, on Unix, syscall.EWOULDBLOCK); otherwise the errors of Acquire.
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
	l, err := tryRunnerLock(filepath.Join(dir, LockName))
	var be *BusyError
	if errors.As(err, &be) {
		return be.PID, false, be
	}
	if err != nil {
		return 0, false, err
	}
	defer l.Release()
	content, _ := l.ReadContent(maxLockContent)
	lockID, lockOK := parseLockContent(content)
	err = withStateLock(dir, func() error {
		pid, cleared = clearStaleRecord(dir, Identity{})
		if retireOnClear(dir) {
			cleared = true
		}
		return nil
	})
	if len(content) > 0 && l.WriteContent(nil) == nil {
		cleared = true
	}
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
	Warnings []string   `json:"warnings"` // anything odd: corrupt files, foreign holders
}

// Status reports dir's state: whether a runner holds the lock and who it is,
// the pending restart request, the starters waiting to take over, the stale
// pids the files still name, and warnings about anything odd. Like Running it
// creates nothing, modifies nothing and never makes an Acquire fail.
//
// Verdict, when the lock file names a holder, is the liveness verdict of that
// identity: "self", "alive", "dead", "stale", "foreign", "other-namespace" or
// "unverifiable".
//
// Errors: an error naming the path when dir exists but cannot be read, or
// runner.lock is a symlink or a directory. A missing dir reports not held.
func Status(dir string) (Report, error) {
	r := Report{Dir: dir, Waiting: []Identity{}, Stale: []int{}, Warnings: []string{}}
	if err := checkDir("Status", dir); err != nil {
		return r, err
	}
	if abs, err := filepath.Abs(dir); err == nil {
		r.Dir = abs
	}
	st := inspectRunner(dir)
	if st.err != nil {
		return r, st.err
	}
	r.Held = st.held
	r.Verified = st.held && st.verified
	if st.contentOK {
		r.Verdict = st.verdict.String()
	}
	rec, recState, recErr := readRecord(dir)
	if st.held {
		r.Holder = holderRecord(st, rec, recState)
		r.Warnings = append(r.Warnings, st.warnings(filepath.Join(dir, LockName))...)
	}
	if recState == fileCorrupt {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s cannot be read and is ignored: %v", filepath.Join(dir, RecordName), recErr))
	}
	for _, pid := range StalePIDs(dir) {
		if !(st.held && st.verified && pid == st.pid) {
			r.Stale = append(r.Stale, pid)
		}
	}
	if mode, ok := RestartRequested(dir); ok {
		r.Restart = mode
	}
	waiting, warn := waitingStarters(dir)
	r.Waiting = append(r.Waiting, waiting...)
	if warn != "" {
		r.Warnings = append(r.Warnings, warn)
	}
	r.Warnings = append(r.Warnings, dirWarnings(dir)...)
	return r, nil
}

// lockState is what inspectLock learned about a lock file.
type lockState struct {
	held      bool             // someone holds the lock (kernel or probe)
	pid       int              // the holder's pid as far as it can be trusted, else 0
	verified  bool             // pid's identity is confirmed alive and it holds the lock
	content   Identity         // the identity in the lock file
	contentOK bool             // content parsed
	verdict   liveness.Verdict // of content, when contentOK
	reason    string           // why not verified
	err       error            // the lock path is unusable (symlink, directory...)
}

// warnings are what Status says about a held lock at lockPath.
func (st lockState) warnings(lockPath string) []string {
	var w []string
	switch st.verdict {
	case liveness.Foreign:
		w = append(w, fmt.Sprintf("%s names a holder on another machine (%s); it is never signalled", lockPath, st.content))
	case liveness.OtherNamespace:
		w = append(w, fmt.Sprintf("%s names a holder in another PID namespace (%s); it is never signalled", lockPath, st.content))
	}
	if !st.verified {
		w = append(w, fmt.Sprintf("the holder of %s cannot be verified (%s)", lockPath, st.reason))
	}
	return w
}

// alive reports whether the identity in the lock file is verified alive.
func (st lockState) alive() bool {
	return st.verdict == liveness.Alive || st.verdict == liveness.Self
}

// inspectLock looks at a lock file without touching the lock: who holds it,
// according to the kernel (or, where the kernel lists no holders, a probe),
// and whether the identity written in it is that holder and alive. A shared
// lock counts as held too: it refuses Acquire as surely as an exclusive one
// (any user who can read the file can take one).
func inspectLock(path string) lockState {
	var st lockState
	if st.err = st.readContent(path); st.err != nil {
		return st
	}
	holders, exists, known := filelock.Holders(path)
	switch {
	case !exists:
		return lockState{}
	case !known:
		st.probe(path)
		return st
	}
	if len(holders) == 0 && st.alive() {
		holders = lookAgain(path)
	}
	st.fromHolders(holders)
	return st
}

// readContent reads the identity in the lock file at path and checks it.
// It returns an error only for a path that cannot be a lock file.
func (st *lockState) readContent(path string) error {
	data, err := readFile(path, maxLockContent)
	switch {
	case errors.Is(err, durable.ErrSymlink), errors.Is(err, durable.ErrIsDir), errors.Is(err, durable.ErrNotRegular):
		return err
	case errors.Is(err, syscall.ENOTDIR):
		return pathError("refusing", filepath.Dir(path), durable.ErrNotDir)
	case err == nil, errors.Is(err, durable.ErrTooLarge):
		st.content, st.contentOK = parseLockContent(data)
	}
	if !st.contentOK {
		st.reason = "the lock file names no holder"
		return nil
	}
	var why string
	st.verdict, why = liveness.Check(liveness.Identity(st.content))
	st.reason = st.content.String() + ": " + st.verdict.String() + " (" + why + ")"
	return nil
}

// lookAgain reads the kernel's lock list again, up to three times, for a lock
// file that names a live identity while the first pass listed no lock. A
// release clears the identity before it unlocks, so that is most likely a
// pass of /proc/locks that missed the entry: the file is read a page per
// read(2), resumed by position, and locks that come and go between the reads
// shift entries out of view.
func lookAgain(path string) []filelock.Holder {
	for range 3 {
		if holders, _, _ := filelock.Holders(path); len(holders) > 0 {
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
		if st.contentOK && h.PID == st.content.PID {
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
	if st.held && st.contentOK && !st.verified {
		st.reason = fmt.Sprintf("the kernel names pid %d as the holder, not the lock file's %s", st.pid, st.content)
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
		st.pid, st.verified = st.content.PID, true
	}
}

// inspectRunner is inspectLock for dir's runner lock. Where the lock file
// carries no identity (Windows, whose locked files cannot be read), the
// holder is named from runner.json instead, and trusted only when verified
// alive.
func inspectRunner(dir string) lockState {
	st := inspectLock(filepath.Join(dir, LockName))
	if st.err != nil || !st.held || st.contentOK || filelock.ListsHolders() {
		return st
	}
	rec, state, _ := readRecord(dir)
	if state != fileOK {
		return st
	}
	v, why := liveness.Check(liveness.Identity(rec.Process))
	st.content, st.contentOK, st.verdict = rec.Process, true, v
	st.reason = rec.Process.String() + " (from " + RecordName + "): " + v.String() + " (" + why + ")"
	if st.alive() {
		st.pid, st.verified = rec.PID, true
	}
	return st
}

// dirWarnings reports what is odd about dir itself.
func dirWarnings(dir string) []string {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil
	}
	if durable.OpenToAll(fi) {
		return []string{fmt.Sprintf("%s is world-writable without the sticky bit: any user can replace the runner's files; chmod o-w or +t it", dir)}
	}
	return nil
}
