package runnerstate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/runnerstate/runnerstate/internal/advice"
	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/holder"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/reentry"
)

// ErrBusy reports that a lock is held by someone else. Every busy answer is a
// *BusyError that names the holder as far as it is known; test for it with
// errors.Is(err, ErrBusy).
var ErrBusy = errors.New("runnerstate: lock is held by another process")

// ErrLockingUnsupported reports a filesystem that refuses file locks (ENOLCK,
// EOPNOTSUPP: some network and FUSE filesystems), or a system without them
// (js, wasip1, plan9). Without working locks no exclusion can be promised, so
// nothing proceeds: move the directory to a local disk.
//
// It is also the answer on a filesystem whose locks do not exclude processes
// that reach it through another mount or machine (NFS, SMB/CIFS, 9p, and
// every FUSE filesystem: sshfs, rclone, bindfs, virtiofs...): every lock of
// this package is refused there before anything is created, in a message
// that names the filesystem's type, unless the type is trusted
// (TrustFilesystem, RUNNERSTATE_TRUST_FS). And on Linux a runner lock is
// refused whatever the filesystem claims when another live process is found
// to hold the same runner.lock through another mount at the same time.
var ErrLockingUnsupported = errors.New("runnerstate: file locking is not supported on this filesystem; move it to a local disk")

// TrustFilesystem adds filesystem types, as /proc/self/mountinfo names them
// (fuse.gocryptfs, fuseblk, nfs4...; on macOS f_fstypename; on Windows
// "remote" or "unc"), to the types whose locks this process trusts to
// exclude, and returns a func that restores the list as it was (for
// tests). The environment variable RUNNERSTATE_TRUST_FS (comma-separated
// type names, read when the first such filesystem is judged) starts the
// list. Trust a type only when every process reaches the directory through
// one mount on one machine: two machines on a trusted network filesystem
// are not excluded (use the etcd module). On Linux the runner lock's
// cross-check still refuses a lock proven not to exclude. Safe for
// concurrent use.
func TrustFilesystem(types ...string) (restore func()) { return fsinfo.Trust(types...) }

// This package's words for the errors of internal packages.

// pathError names the operation and path. The operation carries the package
// name so that every message starts with it, and a system error says what to
// do (internal/advice).
func pathError(op, path string, err error) error {
	if durable.IsNotDir(err) {
		return public(durable.NotDir(path)) // name the file that stands in the way
	}
	if d := advice.Denied(path, err); d != nil {
		return d
	}
	return &fs.PathError{Op: "runnerstate: " + op, Path: path, Err: advice.Advise(err)}
}

// public turns an error from an internal package into this package's
// vocabulary: the *fs.PathError it is gets an Op that names the package, so
// that every message starts with "runnerstate: ", a system error says what to
// do (internal/advice), and a filesystem's refusal of locks becomes
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
	if d := advice.Denied(pe.Path, pe.Err); d != nil {
		return d
	}
	return &fs.PathError{Op: "runnerstate: " + pe.Op, Path: pe.Path, Err: advice.Advise(pe.Err)}
}

// errBadName refuses a state file name that is not a plain file name.
var errBadName = errors.New("is not a plain file name of its own")

// errorf formats an error whose message starts with the package name.
func errorf(format string, args ...any) error {
	return fmt.Errorf("runnerstate: "+format, args...)
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

// BusyError is the answer of every lock attempt that found the lock held. The
// holder fields are hints read at the moment of refusal (by the time you read
// them the holder may have gone): PID is the holder's pid when known, else 0;
// Verified says that pid's identity (pid, start ticks, boot id, PID namespace)
// was confirmed alive, so it is not a recycled pid; Owner is a data dir, not
// a process: the one the holder serves, when known (a scope's holder, see
// AcquireScope).
// Orphan says the directory is held only through tree.lock, by processes of
// a previous runner's tree (see Inherit): PID is one of them, and Takeover
// stops them.
//
// errors.Is(err, ErrBusy) is true for every *BusyError, and on Unix so is
// errors.Is(err, syscall.EWOULDBLOCK). A wait that ended because its context
// ended also wraps the context's error, so errors.Is(err,
// context.DeadlineExceeded) or errors.Is(err, context.Canceled) holds too.
type BusyError struct {
	Path     string // the lock file
	PID      int    // holder's pid when known, else 0
	Verified bool   // PID's identity confirmed alive
	Owner    string // a data dir: what the holder serves, when known (a scope's); the holder itself is PID
	Orphan   bool   // held by orphans of a previous runner's tree, through tree.lock

	cause   error // the context's error when a wait ended with the lock still busy
	letGo   bool  // the lock was taken as the context ended, and let go at once
	lost    bool  // Path was lost (deleted or replaced) while PID held it; PID still holds tree.lock
	orphans int   // how many orphans hold tree.lock, when Orphan
}

// Error names the lock file, the holder as far as it is known, and why the
// wait ended when it was a wait.
func (e *BusyError) Error() string {
	var b strings.Builder
	b.WriteString("runnerstate: ")
	switch {
	case e.letGo:
		b.WriteString(e.Path)
		b.WriteString(" was let go as soon as it was taken: the context had ended")
	case e.Orphan:
		dir := filepath.Dir(e.Path)
		b.WriteString(dir)
		b.WriteString(" is held by the orphans of a previous runner's tree: ")
		e.writeHolder(&b)
		if e.orphans > 1 {
			fmt.Fprintf(&b, " and %d more still hold ", e.orphans-1)
		} else {
			b.WriteString(" still holds ")
		}
		b.WriteString(filepath.Join(dir, treeLockName))
		b.WriteString("; Takeover stops them, or wait for them to exit")
	case e.lost:
		b.WriteString(e.Path)
		b.WriteString(" was deleted or replaced while ")
		e.writeHolder(&b)
		b.WriteString(" held it, and that runner still holds ")
		b.WriteString(filepath.Join(filepath.Dir(e.Path), treeLockName))
		b.WriteString(": it is told RestartLost, and Takeover escalates if it does not go")
	default:
		b.WriteString(e.Path)
		b.WriteString(" is locked by ")
		e.writeHolder(&b)
	}
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	return b.String()
}

func (e *BusyError) writeHolder(b *strings.Builder) {
	switch {
	case e.PID <= 0:
		b.WriteString("another process")
	case e.PID == os.Getpid() && !e.Orphan:
		b.WriteString("this process (pid ")
		b.WriteString(strconv.Itoa(e.PID))
		b.WriteString(")")
	default:
		b.WriteString("pid ")
		b.WriteString(strconv.Itoa(e.PID))
		if e.Verified {
			b.WriteString(" (verified alive)")
		} else {
			b.WriteString(" (unverified)")
		}
	}
	if e.Owner != "" {
		b.WriteString(" serving ")
		b.WriteString(e.Owner)
	}
}

// Is reports whether target is ErrBusy or, on Unix, syscall.EWOULDBLOCK.
func (e *BusyError) Is(target error) bool {
	return target == ErrBusy || (filelock.WouldBlockErrno != nil && target == filelock.WouldBlockErrno)
}

// Unwrap returns the context's error when a wait ended with the lock busy,
// else nil.
func (e *BusyError) Unwrap() error { return e.cause }

// Lock takes an exclusive lock on the file at path, creating it (0644) if it
// does not exist, and waits until it is free or ctx ends. The returned unlock
// func releases the lock; it is idempotent and safe to call from any
// goroutine.
//
// The file is opened close-on-exec (children never inherit the lock), never
// through a symlink, never truncated and never unlinked; after locking, the
// locked descriptor is checked to still be the file at path, and the attempt
// is retried when the file was replaced. Two Lock calls on one path exclude
// each other inside one process just as they do across processes.
//
// Errors: when ctx ends first, a *BusyError that satisfies errors.Is for both
// ErrBusy and ctx.Err(); a filesystem without locks gives ErrLockingUnsupported;
// a symlink, a directory or another non-regular file at path gives an error
// naming path; anything else is the system's error naming path.
//
// The context: ctx bounds the wait. A ctx that has already ended when Lock is
// called still gets one attempt without waiting (the way to ask once). Once
// Lock has begun with a live ctx, it never succeeds after ctx ends: a lock
// handed over at the instant ctx ends is let go at once, and Lock returns
// the *BusyError wrapping ctx.Err() it would have returned a moment earlier.
// So a nil error means the lock is held and ctx did not end while Lock
// waited. ctx can still end the instant after Lock returns: a caller that
// cancels ctx to stop (on SIGTERM, say) looks at its own stop cause after a
// successful return too.
//
// A wait that ends early may leave one goroutine per path and lock mode per
// process blocked in flock(2) until the holder releases (a blocked flock cannot
// be interrupted); it then releases the lock at once, and never recreates the
// file. In-process waiters queue behind that goroutine, first come first
// served, and a waiter in another process is woken by the kernel itself the
// moment the holder releases.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	l, err := waitLock(ctx, path, filelock.Exclusive, 0o644, inspectByName)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// TryLock takes an exclusive lock on the file at path like Lock, without
// waiting: when the lock is held it returns a *BusyError naming the holder.
// After a Lock of this process gave up waiting, its parked goroutine takes
// the lock for an instant when the holder releases it (and lets it go at
// once); a TryLock in that instant is refused.
func TryLock(path string) (unlock func(), err error) {
	l, err := tryLock(path, filelock.Exclusive, 0o644, inspectByName)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// RLock takes a shared lock on the file at path, creating it (0644) if it does
// not exist, and waits until no exclusive lock is held or ctx ends. Shared
// locks coexist with each other and exclude Lock and TryLock. It needs only
// read permission on the file. Errors, waiting and the context are as for
// Lock.
func RLock(ctx context.Context, path string) (unlock func(), err error) {
	l, err := waitLock(ctx, path, filelock.Shared, 0o644, inspectByName)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// TryRLock takes a shared lock on the file at path like RLock, without
// waiting: when an exclusive lock is held it returns a *BusyError.
func TryRLock(path string) (unlock func(), err error) {
	l, err := tryLock(path, filelock.Shared, 0o644, inspectByName)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// tryLock makes one attempt without waiting: a *BusyError, naming the holder
// as inspect reads it, when the lock is held.
func tryLock(path string, mode filelock.Mode, perm fs.FileMode, inspect inspector) (*filelock.File, error) {
	l, err := filelock.TryLock(path, mode, perm)
	if errors.Is(err, filelock.ErrWouldBlock) {
		return nil, busyError(path, nil, inspect)
	}
	return l, public(err)
}

// waitLock waits for the lock until ctx ends (see Lock for the context's
// rules): a *BusyError wrapping ctx.Err(), naming the holder as inspect reads
// it, when it ends first.
func waitLock(ctx context.Context, path string, mode filelock.Mode, perm fs.FileMode, inspect inspector) (*filelock.File, error) {
	live := ctx.Err() == nil
	l, err := filelock.Lock(ctx, path, mode, perm)
	if errors.Is(err, filelock.ErrWouldBlock) {
		return nil, busyError(path, ctx.Err(), inspect)
	}
	if err != nil {
		return nil, public(err)
	}
	if err := keepIfLive(ctx, live, path, l.Release); err != nil {
		return nil, err
	}
	return l, nil
}

// keepIfLive is the last step of every call that waits with a context: when
// the call began with a live ctx that has ended since, what was just taken
// is let go (by release) and the answer is the busy one, so that a call never
// succeeds after its context ended. A call that began with an ended ctx made
// its one attempt knowingly and keeps what it got.
func keepIfLive(ctx context.Context, live bool, path string, release func()) error {
	if !live || ctx.Err() == nil {
		return nil
	}
	release()
	return &BusyError{Path: path, cause: ctx.Err(), letGo: true}
}

// What is known of a lock's holder.

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

// confirmation is how a holder was verified (holder.Via).
type confirmation = holder.Via

const (
	viaLockFile   = holder.ViaLockFile // the lock file's identity, held per the kernel
	viaRecordLock = holder.ViaHintLock // runner.json's identity and lock descriptor, per its fdinfo
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
// (holder.Inspect says how): who holds it, and whether the identity written
// in it, as this package writes it (lockContent), is that holder and alive.
func inspectLock(path string) lockState {
	return stateOf(holder.Inspect(path, maxLockContent, parseHolder))
}

// stateOf is the lockState of what holder.Inspect read, in this package's
// words.
func stateOf(h holder.State) lockState {
	return lockState{
		held: h.Held, pid: h.PID, verified: h.Verified, holder: Identity(h.Holder), named: h.Named,
		verdict: h.Verdict, fd: h.FD, silent: h.Silent, hidden: h.Hidden, reason: h.Reason, err: public(h.Err),
	}
}

// parseHolder is holder.Parse for the line a holder writes into its lock
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
// protocol reads its directory (holder.InspectPair says how): runner.json
// also names the holder, with the descriptor it locks runner.lock through
// (Record.LockFD), and tree.lock, held by the runner and the children it
// started, says what holds the directory when runner.lock is free (lostFile:
// the runner lost runner.lock and still runs; treeHeld: orphans).
func inspectRunner(dir string) lockState {
	p := holder.InspectPair(holder.Pair{
		Lock: filepath.Join(dir, LockName), Tree: filepath.Join(dir, treeLockName),
		Limit: maxLockContent, Parse: parseHolder, Hint: func() (holder.Hint, bool) { return recordHint(dir) },
	})
	st := stateOf(p.State)
	st.via, st.lostFile, st.treeHeld = p.Via, p.LostFile, p.TreeHeld
	switch {
	case p.OtherMount != "":
		st.heldThrough(dir, p.OtherMount)
	case p.LostFile:
		st.notes = append(st.notes, fmt.Sprintf("%s was lost (deleted, renamed or replaced while held): its holder still runs and holds %s", filepath.Join(dir, LockName), filepath.Join(dir, treeLockName)))
	case p.Via == holder.ViaHint && filelock.CarriesContent: // elsewhere runner.json is how a holder is always named
		st.notes = append(st.notes, fmt.Sprintf("%s; the holder was named from %s", p.Unnamed, RecordName))
	}
	return st
}

// recordHint is the holder runner.json names, for holder.Pair.
func recordHint(dir string) (holder.Hint, bool) {
	rec, state, _ := readRecord(dir)
	if state != fileOK || rec.PID != rec.Process.PID {
		return holder.Hint{}, false
	}
	return holder.Hint{ID: liveness.Identity(rec.Process), FD: rec.LockFD}, true
}

// heldThrough makes st the state of dir's runner lock held by its named
// holder through another mount, where the holder sees it at holderPath
// (holder.Elsewhere), with the note Status gives: file locks exclude
// nothing between the two mounts, but a runner runs.
func (st *lockState) heldThrough(dir, holderPath string) {
	st.held, st.pid, st.verified, st.via, st.otherMount = true, st.holder.PID, true, viaLockFile, true
	st.notes = append(st.notes, fmt.Sprintf("%s is held by pid %d through another mount (%s): file locks on %s do not exclude between the two, so no runner can be admitted here safely; use one path on a local disk",
		filepath.Join(dir, LockName), st.holder.PID, holderPath, cmp.Or(fsinfo.TypeOf(dir), "this filesystem")))
}

// elsewhereToo is, for Status, holder.Elsewhere asked of a lock found held
// whose named holder was not already found through another mount, for its
// warning (the kernel may have matched the holder by inode number alone);
// only where the lock file carries content.
func (st *lockState) elsewhereToo(dir string) {
	if _, ok := st.namedHolder(); !ok || st.otherMount || !filelock.CarriesContent {
		return
	}
	if holderPath, held := holder.Elsewhere(liveness.Identity(st.holder), st.fd, filepath.Join(dir, LockName)); held {
		st.heldThrough(dir, holderPath)
	}
}

// inspectScopeLock names the holder of a scope's scope.lock from its sidecar
// (inspectScope).
func inspectScopeLock(path string) lockState { return inspectScope(filepath.Dir(path)) }

// withStateLock runs fn holding dir's state lock: an exclusive flock on
// dir/.state.lock. It serialises read-modify-write of state files across
// goroutines and processes. The wait is bounded by stateLockWait.
func withStateLock(dir string, fn func() error) error {
	return withStateLockCtx(context.Background(), dir, fn)
}

// withStateLockCtx is withStateLock whose wait also ends with ctx.
//
// fn must not take dir's state lock again (it uses the *Locked helpers): the
// lock is not reentrant, so a goroutine that asks for it while it holds it
// would wait for itself. Such a call fails at once with an error wrapping
// errStateLockReentered.
func withStateLockCtx(ctx context.Context, dir string, fn func() error) error {
	waitCtx, cancel := context.WithTimeout(ctx, stateLockWait)
	defer cancel()
	path := filepath.Join(dir, stateLockName)
	key := path
	if abs, err := filepath.Abs(path); err == nil {
		key = abs
	}
	if stateLockHolders.Held(key) {
		return errorf("state lock %s asked for again by the code that holds it, which would wait for itself; this is a bug in runnerstate, please report it: %w", path, errStateLockReentered)
	}
	l, err := waitLock(waitCtx, path, filelock.Exclusive, 0o644, inspectLock)
	if err != nil {
		if errors.Is(err, ErrBusy) && ctx.Err() == nil && waitCtx.Err() != nil {
			return errorf("state lock %s stayed busy for %v; a process is stuck writing state there (stopped?): %w", path, stateLockWait, err)
		}
		return err
	}
	defer l.Release()
	defer stateLockHolders.Enter(key)()
	return fn()
}

// stateLockHolders knows which goroutine holds each state lock this process
// holds (by its absolute path), so that withStateLockCtx refuses re-entry.
var stateLockHolders reentry.Guard

// errStateLockReentered is what withStateLockCtx refuses a re-entry with.
var errStateLockReentered = errors.New("state lock is not reentrant")

// stateLockWait bounds the wait for a directory's state lock, which is only
// ever held for one small file write.
const stateLockWait = 30 * time.Second
