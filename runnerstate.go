// Package runnerstate coordinates a single runner process per data directory
// on one machine: exactly one process works the directory at a time, and the
// process that starts a runner, the runner itself and the next runner that
// takes over hand the directory between them without ever overlapping,
// without signalling the wrong process, and without dropping or tearing state.
//
// The kernel lock (flock(2) on runner.lock) is the only authority: held while
// the runner lives, dropped by the kernel the instant it dies. Everything
// else in the directory is a hint that names the holder, and only a process
// verified alive is ever signalled.
//
// The calls that take a context.Context (Lock, RLock, Takeover, Standby,
// Start, AcquireScope, SyncRunning, RequestRestartContext) return by its end
// whatever another process holds, and never succeed once it has ended (see
// Lock); the writers that take none wait 30 s at most. Every busy answer is a
// *BusyError naming the lock file waited on and its holder (another user as such). Errors name the path they are about and say what to
// do; callers match them with errors.Is against the sentinels (ErrBusy,
// ErrNotHolder, ...) and errors.As against *BusyError. Every function that
// takes a directory refuses the empty name "" (pass "." for the current
// directory); those without an error answer (StalePIDs, RestartRequested,
// WatchRestart) treat it as a directory with nothing in it.
//
// Which call to use is in the README and the calls by concern in
// docs/architecture.md; what each promise rests on, what is not promised,
// and how macOS, Windows and systems without file locks degrade, in
// [docs/guarantees.md]; every file runnerstate keeps, its format and the
// order it is written in, in [docs/protocol.md].
//
// [docs/protocol.md]: https://github.com/runnerstate/runnerstate/blob/main/docs/protocol.md
// [docs/guarantees.md]: https://github.com/runnerstate/runnerstate/blob/main/docs/guarantees.md
package runnerstate

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/hold"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// ExitBusy is the exit code the examples use when they are refused because
// another runner holds the directory: EX_TEMPFAIL from BSD's sysexits.h, "try
// again later".
const ExitBusy = 75

// ensureDir creates dir (0700, parents too: only its user may reach what it
// holds) when it does not exist and checks it is a directory.
func ensureDir(dir string) error { return public(durable.EnsureDir(dir, 0o700)) }

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
	err := withStateLock(h.Dir(), func(stateHeld) error {
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

// Acquire takes dir's runner lock without waiting, creating dir (0700) and
// runner.lock (0600: a shared lock taken by anyone who could read it would
// refuse every runner) when they do not exist. On success this process is the
// one runner of dir: its Identity is written into runner.lock, a stale
// runner.json left by a previous runner is removed (an unreadable one is set
// aside, logged once; a readable one is first kept as start.json's
// last_exit when start.lock is free: Report.LastExit), and a restart request is
// retired when it was addressed to another runner or made before this call; a
// request made while this call ran is kept for this runner.
//
// A hold is two kernel locks, runner.lock and tree.lock (see Inherit): the
// directory is free only when both are (docs/guarantees.md).
//
// release removes runner.json, clears the identity in both lock files,
// retires a restart request addressed to this runner, closes the descriptors
// Inherit handed out, then frees tree.lock and last runner.lock; it is
// idempotent. The lock files themselves are never removed. A process that
// dies without calling release has its locks freed at once all the same (the
// kernel drops them, except where children inherited tree.lock), and the next
// Acquire clears what it left.
//
// Errors: a *BusyError naming the holder when the directory is held (by
// another process, by this one through an earlier Acquire, or by orphans or
// a runner whose runner.lock was lost: then PID is one of them), its Path
// runner.lock's; one naming .state.lock (which serialises state writes) when
// another process held that for 30 s. ErrLockingUnsupported on a filesystem
// without locks; an error naming the path when dir is not a directory, or a
// lock file is a symlink, a directory, another non-regular file or not writable.
// ErrNewerProtocol (wrapped, naming the file and both protocol numbers) when
// one of dir's files says a newer protocol: nothing is taken or written.
func Acquire(dir string) (release func(), err error) {
	if err := ownDir("Acquire", dir); err != nil {
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
	err = withStateLock(dir, func(held stateHeld) error { settleIn(held, Identity(h.Self()), since); return nil })
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
func settleIn(held stateHeld, self Identity, since time.Time) {
	dir := held.dir
	recordLastExit(dir, self)
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
// makes a concurrent Acquire fail. The answer may be out of date by the time
// it is used. Cost, on Linux: against a holder that published its record
// (Publish, or Takeover's admission), a stat of runner.lock and a read of runner.json
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
	if err := readDir("Running", dir); err != nil {
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
	if state == fileOK && newerProtocol(sr.protocol) {
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
// (ErrNewerProtocol among them, before anything is cleared; .state.lock
// waited for at most 30 s). A nil error means nothing stale is left.
func ClearStale(dir string) (pid int, cleared bool, err error) {
	if err := ownDir("ClearStale", dir); err != nil {
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
	err = withStateLock(dir, func(stateHeld) error {
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
// caller to note before the runner it starts clears them; they prove nothing, and a
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
		// carries the lock, is left unopened (see lockholder.InspectPair).
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
