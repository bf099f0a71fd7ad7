package runnerstate

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/runnerstate/runnerstate/internal/advice"
	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
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

// checkDir refuses the empty directory name, and one that is not valid
// UTF-8 (checkName, trust.go). "" would mean the current directory to the
// calls that join paths and an error to those that stat it, so it is the
// same clear error for all of them.
func checkDir(op, dir string) error {
	if dir == "" {
		return errorf("%s: the directory name is empty; name one (\".\" is the current directory)", op)
	}
	return checkName(op, dir)
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

func (e lockingUnsupported) Unwrap() error { return e.cause }

// BusyError is the answer of every lock call that found the lock held. The
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
	b.WriteString(otherUser(e.PID))
}

// Is reports whether target is ErrBusy or, on Unix, syscall.EWOULDBLOCK.
func (e *BusyError) Is(target error) bool {
	return target == ErrBusy || (filelock.WouldBlockErrno != nil && target == filelock.WouldBlockErrno)
}

// Unwrap returns the context's error when a wait ended with the lock busy,
// else nil.
func (e *BusyError) Unwrap() error { return e.cause }

// ErrNewerProtocol reports a runner directory written under a protocol newer
// than this build knows (docs/protocol.md): the calls that write or admit
// refuse it rather than guess, with an error naming both protocol numbers;
// Running and Status report it. Upgrade this program, or let the newer
// build's runner go first.
var ErrNewerProtocol = errors.New("runnerstate: the runner directory was written under a newer protocol than this build knows")

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
