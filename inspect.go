package runnerstate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/lockholder"
)

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

// confirmation is how a holder was verified (lockholder.Via).
type confirmation = lockholder.Via

const (
	viaLockFile   = lockholder.ViaLockFile // the lock file's identity, held per the kernel
	viaRecordLock = lockholder.ViaHintLock // runner.json's identity and lock descriptor, per its fdinfo
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

// inspectLock looks at the lock file at path without touching the lock
// (lockholder.Inspect says how): who holds it, and whether the identity written
// in it, as this package writes it (lockContent), is that holder and alive.
func inspectLock(path string) lockState {
	return stateOf(lockholder.Inspect(path, maxLockContent, parseHolder))
}

// stateOf is the lockState of what lockholder.Inspect read, in this package's
// words.
func stateOf(h lockholder.State) lockState {
	return lockState{
		held: h.Held, pid: h.PID, verified: h.Verified, holder: Identity(h.Holder), named: h.Named,
		verdict: h.Verdict, fd: h.FD, silent: h.Silent, hidden: h.Hidden, reason: h.Reason, err: public(h.Err),
	}
}

// parseHolder is lockholder.Parse for the line a holder writes into its lock
// file (lockContent).
func parseHolder(data []byte) (liveness.Identity, int, bool) {
	lc, err := lockLineMemo.Parse(data)
	return liveness.Identity(lc.Identity), lc.FD, err == nil
}

// busyError describes the holder of path as inspect reads it. cause is the
// context's error when a wait ended.
func busyError(path string, cause error, inspect inspector) *BusyError {
	st := inspect(path)
	return &BusyError{Path: path, PID: st.pid, Verified: st.occupancy().verified(), cause: cause}
}

// An inspector reads what a busy answer says of the holder of the lock at
// path. Every call that can be refused names the inspector of the lock it
// takes: the lock layer itself never decides by a file's name.
type inspector func(path string) lockState

// inspectors is the protocol's table from a lock file's name to the
// inspector that names its holder. Where the lock file cannot name its
// holder (Windows), the files beside it can: a runner directory's
// runner.lock is named from runner.json as Running names it; a scope's lock
// from its sidecar. Any other lock is named by inspectLock alone.
var inspectors = map[string]inspector{
	LockName:      inspectRunnerLock,
	scopeLockName: inspectScopeLock,
}

// inspectByName is the inspector of Lock, TryLock, RLock and TryRLock: the
// one inspectorOf picks for the lock's name, looked up only when the lock
// is busy (so the uncontended path stays as small as the compiler inlines).
func inspectByName(path string) lockState { return inspectorOf(path)(path) }

// inspectorOf is the inspector Lock, TryLock, RLock and TryRLock use for
// path, from the table of the protocol's names: so a plain TryLock on a
// runner.lock names the runner as Acquire's refusal does, on every platform.
func inspectorOf(path string) inspector {
	if inspect, ok := inspectors[filepath.Base(path)]; ok {
		return inspect
	}
	return inspectLock
}

// inspectRunnerLock names the holder of a runner directory's runner.lock as
// Running does (inspectRunner), or as this very process when it holds the
// directory and has not published yet.
func inspectRunnerLock(path string) lockState {
	dir := filepath.Dir(path)
	st := inspectRunner(dir)
	if h := holdOf(dir); st.occupancy().held() && st.pid == 0 && h != nil {
		st.pid, st.verified = h.Self().PID, true
	}
	return st
}

// inspectRunner is inspectLock for dir's runner lock, as the runner
// protocol reads its directory (lockholder.InspectPair says how): runner.json
// also names the holder, with the descriptor it locks runner.lock through
// (Record.LockFD), and tree.lock, held by the runner and the children it
// started, says what holds the directory when runner.lock is free (lostFile:
// the runner lost runner.lock and still runs; treeHeld: orphans).
func inspectRunner(dir string) lockState {
	p := lockholder.InspectPair(lockholder.Pair{
		Lock: filepath.Join(dir, LockName), Tree: filepath.Join(dir, treeLockName),
		Limit: maxLockContent, Parse: parseHolder, Hint: func() (lockholder.Hint, bool) { return recordHint(dir) },
	})
	st := stateOf(p.State)
	st.via, st.lostFile, st.treeHeld = p.Via, p.LostFile, p.TreeHeld
	switch {
	case p.OtherMount != "":
		st.heldThrough(dir, p.OtherMount)
	case p.LostFile:
		st.notes = append(st.notes, fmt.Sprintf("%s was lost (deleted, renamed or replaced while held): its holder still runs and holds %s", filepath.Join(dir, LockName), filepath.Join(dir, treeLockName)))
	case p.Via == lockholder.ViaHint && filelock.CarriesContent: // elsewhere runner.json is how a holder is always named
		st.notes = append(st.notes, fmt.Sprintf("%s; the holder was named from %s", p.Unnamed, RecordName))
	}
	return st
}

// recordHint is the holder runner.json names, for lockholder.Pair.
func recordHint(dir string) (lockholder.Hint, bool) {
	rec, state, _ := readRecord(dir)
	if state != fileOK || rec.PID != rec.Process.PID {
		return lockholder.Hint{}, false
	}
	return lockholder.Hint{ID: liveness.Identity(rec.Process), FD: rec.LockFD}, true
}

// heldThrough makes st the state of dir's runner lock held by its named
// holder through another mount, where the holder sees it at holderPath
// (lockholder.Elsewhere), with the note Status gives: file locks exclude
// nothing between the two mounts, but a runner runs.
func (st *lockState) heldThrough(dir, holderPath string) {
	st.held, st.pid, st.verified, st.via, st.otherMount = true, st.holder.PID, true, viaLockFile, true
	st.notes = append(st.notes, fmt.Sprintf("%s is held by pid %d through another mount (%s): file locks on %s do not exclude between the two, so no runner can be admitted here safely; use one path on a local disk",
		filepath.Join(dir, LockName), st.holder.PID, holderPath, cmp.Or(fsinfo.TypeOf(dir), "this filesystem")))
}

// elsewhereToo is, for Status, lockholder.Elsewhere asked of a lock found held
// whose named holder was not already found through another mount, for its
// warning (the kernel may have matched the holder by inode number alone);
// only where the lock file carries content.
func (st *lockState) elsewhereToo(dir string) {
	if _, ok := st.namedHolder(); !ok || st.otherMount || !filelock.CarriesContent {
		return
	}
	if holderPath, held := lockholder.Elsewhere(liveness.Identity(st.holder), st.fd, filepath.Join(dir, LockName)); held {
		st.heldThrough(dir, holderPath)
	}
}

// inspectScopeLock names the holder of a scope's scope.lock from its sidecar
// (inspectScope).
func inspectScopeLock(path string) lockState { return inspectScope(filepath.Dir(path)) }

// lockContent is the line a holder writes into its lock file: its identity
// and the descriptor it holds the lock through, with which any reader can
// confirm the lock from /proc/<pid>/fdinfo/<fd> in one small read.
type lockContent struct {
	Identity
	FD int `json:"fd,omitempty"`
}

// parseLockLine parses the first line of a lock file: the holder's
// lockContent as JSON, or a bare decimal pid from older runners (which
// carries no start identity, so it can never be verified). ok is false for
// anything else, including a pid <= 0.
func parseLockLine(data []byte) (lc lockContent, ok bool) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return lockContent{}, false
	}
	if data[0] == '{' {
		if err := json.Unmarshal(data, &lc); err != nil || !liveness.ValidPID(lc.PID) || lc.FD < 0 {
			return lockContent{}, false
		}
		return lc, true
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil || !liveness.ValidPID(pid) {
		return lockContent{}, false
	}
	return lockContent{Identity: Identity{PID: pid}}, true
}

// parseLockContent is parseLockLine's identity.
func parseLockContent(data []byte) (Identity, bool) {
	lc, ok := parseLockLine(data)
	return lc.Identity, ok
}

// lockLineMemo remembers the last decoding of a lock file's line, as
// recordMemo does runner.json's, and for the same reason.
var (
	lockLineMemo = durable.NewLast(func(data []byte) (lockContent, error) {
		lc, ok := parseLockLine(data)
		if !ok {
			return lockContent{}, errNoHolder
		}
		return lc, nil
	}, func(lc lockContent) lockContent { return lc })
)

var errNoHolder = errors.New("names no holder")
