package lockholder

import (
	"path/filepath"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/locktable"
)

// A Hint is the holder a file beside a lock names (a record its holder
// publishes): its identity, and the descriptor it locks the lock through
// (0 when it names none).
type Hint struct {
	ID liveness.Identity
	FD int
}

// Via is how a Pair's verified holder was confirmed.
type Via uint8

const (
	ViaLockFile Via = iota // the lock file's identity, held per the kernel
	ViaHint                // the hint's identity, the pid the kernel names
	ViaHintLock            // the hint's identity and lock descriptor, per its fdinfo
)

// Pair is a lock file (Lock) whose holder also holds a second lock (Tree),
// which the holder's children inherit, so that the pair stays held while
// they live; and a file beside them that names the holder too (Hint, read
// each time it is asked: ok is false when it names nobody).
type Pair struct {
	Lock, Tree string
	Limit      int   // what is read of a lock file
	Parse      Parse // what a lock file's content names
	Hint       func() (Hint, bool)
}

// PairState is what InspectPair learned about a Pair: the State of the lock
// that answers (Lock's, or Tree's when LostFile), and how.
type PairState struct {
	State
	Via        Via    // how a verified holder was confirmed
	OtherMount string // Lock as its holder sees it, when held through another mount (Elsewhere)
	LostFile   bool   // held through Tree only: Lock was lost under its holder, which still runs
	TreeHeld   bool   // Lock free, Tree held: the children of a gone holder (or a holder not visible)
	Unnamed    string // why the lock file did not name the holder, when the hint did (ViaHint)
}

// InspectPair is Inspect for p's lock, which the hint can also name: when
// the lock file names nobody and the kernel could not confirm the holder
// (the lock file cannot be read, as by another user, who may not read that
// process's descriptors either; it was erased; or, on Windows, a locked file
// cannot be read at all), the hint's identity is trusted when it is verified
// alive and is the pid the kernel names (or, where the kernel names none,
// when the lock is held). A lock that looks free is held when the identity
// in it holds it through another mount (Elsewhere): the kernel excludes
// nothing between the two mounts, and a probe never says otherwise.
//
// When the lock is free, Tree tells the rest: held by the live holder it
// names (through the descriptor it recorded), that holder lost its lock file
// and still runs (LostFile); held otherwise, a previous holder's children
// still live (TreeHeld).
func InspectPair(p Pair) PairState {
	if st, ok := p.confirmFromHint(); ok {
		return st
	}
	st := PairState{State: Inspect(p.Lock, p.Limit, p.Parse)}
	if st.Err != nil {
		return st
	}
	if !st.Held && st.Named {
		if holderPath, held := Elsewhere(st.Holder, st.FD, p.Lock); held {
			st.Held, st.PID, st.Verified, st.Via, st.OtherMount = true, st.Holder.PID, true, ViaLockFile, holderPath
		}
	}
	if !st.Held {
		return p.inspectTree(st)
	}
	if st.Verified || st.Hidden || !st.Silent {
		return st
	}
	hint, ok := p.Hint()
	if !ok || (st.PID != 0 && hint.ID.PID != st.PID) || (st.PID == 0 && locktable.ListsHolders()) {
		return st
	}
	why := st.Reason
	saved := st
	st.Name(hint.ID)
	if !st.Alive() {
		return saved
	}
	st.PID, st.Verified, st.Via, st.Unnamed = hint.ID.PID, true, ViaHint, why
	return st
}

// confirmFromHint is the probe that touches no lock: the hint names the
// holder and the descriptor it locks p.Lock through, and
// /proc/<pid>/fdinfo/<fd> shows that process's exclusive lock on the file
// now at p.Lock (confirm).
//
// It opens no file that carries a lock and makes no flock call: only a stat
// of the lock file, the hint's read (a file replaced whole on every write,
// so never locked) and the one fdinfo file. That matters beside a process
// that reads /proc/locks (lslocks, a monitoring agent): every such read
// takes the kernel's lock table for writing, and the close of any
// descriptor on a file with a flock on it (fs/locks.c locks_remove_flock)
// waits for it, however many locks the machine holds. ok is false wherever
// this cannot confirm the holder (no hint, or one from a holder not holding
// now; another user's process; a symlink or a directory at p.Lock), and
// Inspect decides.
func (p Pair) confirmFromHint() (st PairState, ok bool) {
	hint, ok := p.Hint()
	if !ok || hint.FD <= 0 || hint.ID.PID <= 0 {
		return PairState{}, false
	}
	ino, err := locktable.InodeOf(p.Lock)
	if err != nil {
		return PairState{}, false
	}
	v, held, reason := confirm(hint.ID, hint.FD, ino)
	if !held {
		return PairState{}, false
	}
	return PairState{State: State{
		Held: true, PID: hint.ID.PID, Verified: true, Holder: hint.ID, Named: true,
		Verdict: v, FD: hint.FD, Reason: reason,
	}, Via: ViaHintLock}, true
}

// inspectTree looks at p.Tree for a pair whose lock (st) is free.
func (p Pair) inspectTree(st PairState) PairState {
	tree := Inspect(p.Tree, p.Limit, p.Parse)
	switch {
	case tree.Err != nil:
		st.Err = tree.Err
	case tree.Verified && tree.Alive():
		return PairState{State: tree, LostFile: true}
	case tree.Held:
		st.TreeHeld = true
	}
	return st
}

// Elsewhere reports whether id, verified alive, holds the lock at path
// through its descriptor fd on another mount than this process's: that
// descriptor is open on a file of the same name on another device, and
// carries an exclusive lock. The descriptor is read before the identity is
// verified (liveness.CheckHolder says why that order proves it is the
// holder). It returns the lock file's path as the holder sees it.
func Elsewhere(id liveness.Identity, fd int, path string) (holderPath string, held bool) {
	ours, err := locktable.InodeOf(path)
	if err != nil || fd < 0 || id.PID <= 0 {
		return "", false
	}
	name := filepath.Base(path)
	_, held, _ = liveness.CheckHolder(id, func() bool {
		p, ino, locked := locktable.LockThrough(id.PID, fd)
		holderPath = p
		return locked == locktable.Yes && filepath.Base(p) == name && ino.Dev != ours.Dev
	})
	return holderPath, held
}
