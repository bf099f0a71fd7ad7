package runnerstate

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/hold"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/lockholder"
	"github.com/runnerstate/runnerstate/internal/locktable"
)

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

// testWithoutTreeLock makes a hold one lock, runner.lock alone, without
// tree.lock: set only by BenchmarkAcquire, to price the second lock.
var testWithoutTreeLock atomic.Bool

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
	if testWithoutTreeLock.Load() {
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
// (lockholder.Shared). The error is ErrLockingUnsupported naming that holder.
// Anything short of proof admits.
func crossCheck(l *filelock.File) error {
	pid, holderPath, shared := lockholder.Shared(l, maxLockContent, parseHolder)
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

// tryRunnerLock makes one try (non-blocking) on a runner lock, creating it
// 0600 (see filelock.TryExclusive): a *BusyError naming the holder when it is held.
func tryRunnerLock(lockPath string) (*filelock.File, error) {
	l, err := filelock.TryExclusive(lockPath)
	if errors.Is(err, filelock.ErrWouldBlock) {
		return nil, busyError(lockPath, nil, inspectRunnerLock)
	}
	return l, public(err)
}

// orphans lists the processes that hold dir's tree.lock, from a scan of every
// process's descriptors (see locktable.ScanHolders for its cost), leaving out
// except (the runner whose tree it is, when it still runs) and the starters
// waiting in Takeover (one takes tree.lock for an instant as it finds it
// free: never an orphan). complete is false when some processes could not
// be read.
func orphans(dir string, except int) (pids []int, complete bool) {
	ino, err := locktable.InodeOf(filepath.Join(dir, treeLockName))
	if err != nil {
		return nil, true
	}
	all, complete := locktable.ScanHolders(ino)
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
// checked after the pin (lockholder.Pinned); else nil. The caller closes it.
func verifiedTreeHolder(dir string, pid int) *liveness.Process {
	return lockholder.Pinned(pid, filepath.Join(dir, treeLockName))
}

// Inherit makes cmd's process part of the runner's tree: it passes cmd a
// descriptor of the runner's tree lock (tree.lock), appended to
// cmd.ExtraFiles (so the child has it as descriptor 3+its index there; the
// caller's entries are kept), so that the directory is not free for the next
// runner while that process, or any process it starts that keeps the
// descriptor, lives. cmd must not have been started. The file belongs to the
// hold: release closes it, and the caller must not.
//
// Once the runner is gone (released, or killed), such processes are
// orphans: Acquire refuses and names one, Status lists them, Standby waits
// for them, and Takeover signals them (SIGTERM at once, SIGKILL KillAfter
// later), each checked first to still hold the descriptor. A process that
// closes its inherited descriptors (a daemon that closes everything above
// stderr, say) leaves the tree, and nothing can keep it in. Children started
// without Inherit are not part of the tree.
//
// Errors: ErrNotHolder (wrapped) unless this process holds dir (Acquire or
// Takeover); an error naming cmd.Path, leaving cmd unchanged, when cmd has
// been started; on Windows, and wherever a lock's descriptor cannot be lent,
// an error wrapping errors.ErrUnsupported.
func Inherit(dir string, cmd *exec.Cmd) error {
	if err := ownDir("Inherit", dir); err != nil {
		return err
	}
	if cmd.Process != nil {
		return errorf("Inherit %s: the command has been started; call Inherit before Start", cmd.Path)
	}
	h := holdOf(dir)
	if h == nil {
		return fmt.Errorf("%w: %s (take it with Acquire or Takeover first)", ErrNotHolder, filepath.Join(dir, LockName))
	}
	f, err := h.Lend()
	if errors.Is(err, hold.ErrReleased) {
		return fmt.Errorf("%w: %s was released", ErrNotHolder, filepath.Join(dir, LockName))
	}
	if err != nil {
		return public(err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	return nil
}
