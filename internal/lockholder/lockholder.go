// Package lockholder tells who holds a kernel lock on a file, as far as that can
// be proven, without touching the lock: from the identity its holder wrote
// into the file, the holder's own descriptors (/proc/<pid>/fdinfo), the
// kernel's lock list (/proc/locks) and, where none of these can answer, a
// probe.
//
// Inspect reads one lock file; InspectPair reads a lock whose holder also
// holds a second lock that its children inherit, with a file beside them
// that names the holder too (a Hint). What a lock file's content means, and
// which files those are, is the caller's: it passes the parser and the
// paths in. Errors are the system's (*fs.PathError) or the durable
// package's sentinels, for the caller to word.
package lockholder

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/locktable"
)

// Parse reads the holder a lock file's content names: its identity and the
// descriptor it locked the file through (0 when it names none). ok is false
// when the content names nobody.
type Parse func(data []byte) (id liveness.Identity, fd int, ok bool)

// State is what Inspect learned about a lock file: whether it is held, and
// who holds it as far as that can be proven.
type State struct {
	Held     bool              // someone holds the lock (kernel or probe)
	PID      int               // the holder's pid as far as it can be trusted, else 0
	Verified bool              // the holder's identity is confirmed alive and it holds the lock
	Holder   liveness.Identity // who holds it: the verified identity, else the best name known
	Named    bool              // Holder names a process (from the lock file or the kernel)
	Verdict  liveness.Verdict  // of Holder, when Named
	FD       int               // the descriptor the lock file says its holder locked through
	Silent   bool              // the lock file names nobody: empty, erased, unparsable, unreadable
	Hidden   bool              // held by a process not visible from this PID namespace
	Reason   string            // why the holder is not verified
	Err      error             // the lock path is unusable (symlink, directory...)
}

// Inspect looks at the lock file at path without touching the lock: who
// holds it, and whether the identity written in it (read up to limit bytes,
// parsed by parse) is that holder and alive. The answer comes from the
// cheapest reading that is exact:
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
// A shared lock counts as held too: it refuses an exclusive locker as surely
// as an exclusive one (any user who can read the file can take one).
func Inspect(path string, limit int, parse Parse) State {
	var st State
	ino, err := st.readContent(path, limit, parse)
	switch {
	case st.Err != nil:
		return st
	case errors.Is(err, fs.ErrNotExist):
		return State{}
	case err != nil:
		st.probe(path) // the kernel cannot be asked about this file; a probe says why
		return st
	}
	if st.confirmedVia(ino) {
		return st
	}
	holders, known := locktable.HoldersOf(ino)
	if !known {
		return st.probeThenName(path, ino)
	}
	st.fromHolders(holders)
	if !st.Held && !locktable.SeesAllHolders() {
		st.probeHidden(path)
	}
	return st
}

// readContent reads the identity in the lock file at path and checks it. It
// sets st.Err for a path that cannot be a lock file, and returns the file it
// read, or the error of finding one when it could not read it (the file
// does not exist, or cannot be read: then it is looked up by path).
func (st *State) readContent(path string, limit int, parse Parse) (locktable.Inode, error) {
	data, id, err := durable.ReadFileID(path, limit)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return locktable.Inode{}, err
	case durable.Unusable(err):
		st.Err = err
		return locktable.Inode{}, nil
	case errors.Is(err, syscall.ENOTDIR):
		st.Err = durable.NotDir(filepath.Dir(path))
		return locktable.Inode{}, nil
	case errors.Is(err, fs.ErrPermission):
		st.Reason, st.Silent = "cannot read "+path+" (permission denied)", true
		return locktable.InodeOf(path)
	case err != nil && !errors.Is(err, durable.ErrTooLarge):
		st.Reason, st.Silent = "cannot read "+path+": "+durable.Unwrap(err).Error(), true
		return locktable.InodeOf(path)
	}
	ino := locktable.Inode{Dev: id.Dev, Ino: id.Ino}
	holder, fd, ok := parse(data)
	if !ok {
		st.Reason, st.Silent = path+" names no holder", true
		return ino, nil
	}
	st.Holder, st.Named, st.FD = holder, true, fd
	return ino, nil
}

// confirmedVia is the exact, O(1) answer: the lock file names its holder and
// the descriptor it locked through, and /proc/<pid>/fdinfo/<fd> shows that
// lock (confirm). Otherwise it checks the named identity the ordinary way,
// for the slower readings to use.
func (st *State) confirmedVia(ino locktable.Inode) bool {
	if !st.Named {
		return false
	}
	if st.FD > 0 {
		if v, held, reason := confirm(st.Holder, st.FD, ino); held {
			st.Verdict, st.Reason = v, reason
			st.Held, st.PID, st.Verified = true, st.Holder.PID, true
			return true
		}
	}
	st.Name(st.Holder)
	return false
}

// probeThenName decides by a probe where the kernel's list could not: it
// lists no holders at all (not Linux), or listed none in a read of several
// passes, which can miss an entry (see locktable.Holders). A lock found held
// is then named from the list, read again (lookAgain); where it still lists
// no holder, the probe's answer stands.
func (st *State) probeThenName(path string, ino locktable.Inode) State {
	unprobed := *st
	st.probe(path)
	if errors.Is(st.Err, fs.ErrPermission) && locktable.ListsHolders() {
		// Another user's lock file, which this process may not open to
		// probe: the kernel's list, read again, is the evidence left.
		unprobed.fromHolders(lookAgain(ino))
		return unprobed
	}
	if st.Err != nil || !st.Held || !locktable.ListsHolders() {
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
func lookAgain(ino locktable.Inode) []locktable.Holder {
	for range 5 {
		if holders, _ := locktable.HoldersOf(ino); len(holders) > 0 {
			return holders
		}
	}
	return nil
}

// fromHolders decides from the kernel's holders: held when any matches the
// file, verified when the identity in it is alive and holds it exclusively.
func (st *State) fromHolders(holders []locktable.Holder) {
	var firstPID int
	for _, h := range holders {
		if st.Named && h.PID == st.Holder.PID {
			st.Held, st.PID = true, h.PID
			st.Verified = st.Alive() && h.Exclusive
			if st.Verified {
				return
			}
			continue
		}
		if h.DevMatch {
			st.Held = true
			if firstPID == 0 || h.Exclusive {
				firstPID = h.PID
			}
		}
	}
	if st.PID == 0 {
		st.PID = firstPID
	}
	if st.Held && st.Named && !st.Verified {
		st.Reason = fmt.Sprintf("the kernel names pid %d as the holder, not the lock file's %s", st.PID, st.Holder)
	}
}

// probe decides by taking and dropping a shared lock, where the kernel lists
// no holders.
func (st *State) probe(path string) {
	held, err := filelock.ProbeHeld(path)
	if err != nil {
		st.Err = err
		return
	}
	st.Held = held
	if held && st.Alive() {
		st.PID, st.Verified = st.Holder.PID, true
	}
}

// probeHidden probes a lock the kernel's list shows free from a child PID
// namespace, where the list leaves out processes outside it. Held means held
// by a process this one cannot see, and so can neither name by pid nor
// signal: the lock file's identity, if any, is from its own namespace.
func (st *State) probeHidden(path string) {
	held, err := filelock.ProbeHeld(path)
	if err != nil || !held {
		return
	}
	st.Held, st.Hidden, st.PID = true, true, 0
	st.Reason = "held by a process not visible from this PID namespace"
}

// Alive reports whether the holder's identity is verified alive.
func (st State) Alive() bool {
	return st.Verdict == liveness.Alive || st.Verdict == liveness.Self
}

// Name takes id as the holder's name and checks it (liveness.Check), with
// the reason in a State's words.
func (st *State) Name(id liveness.Identity) {
	var why string
	st.Holder, st.Named = id, true
	st.Verdict, why = liveness.Check(id)
	st.Reason = reason(id, st.Verdict, why)
}

// reason is why a holder is or is not verified, in a State's words: the
// identity, its verdict, and why.
func reason(id liveness.Identity, v liveness.Verdict, why string) string {
	return id.String() + ": " + v.String() + " (" + why + ")"
}

// confirm reports whether id holds the lock on the file ino through its
// descriptor fd, from /proc/<pid>/fdinfo/<fd>, read before the holder's
// start identity (liveness.CheckHolder says why that order proves it is the
// holder), with the verdict and its reason in a State's words.
func confirm(id liveness.Identity, fd int, ino locktable.Inode) (v liveness.Verdict, held bool, why string) {
	v, held, why = liveness.CheckHolder(id, func() bool {
		return locktable.HeldVia(id.PID, fd, ino) == locktable.Yes
	})
	return v, held, reason(id, v, why)
}

// Shared reports whether the lock l, which this process just took, is held
// at the same time by the holder its content names (read up to limit bytes,
// parsed by parse), through another mount of the very same file: that
// holder, verified alive, holds a lock through its descriptor on a file of
// the same name on another device (Elsewhere), and that descriptor is open
// on the very file l is (sameFile). Anything short of proof (no identity, a
// dead or unverifiable one, a descriptor that is closed, carries no lock, or
// is open on a file of this very filesystem, which the kernel would have
// excluded) is not shared. It returns the holder's pid and its path to the
// lock file.
func Shared(l *filelock.File, limit int, parse Parse) (pid int, holderPath string, shared bool) {
	if !filelock.CarriesContent || l.Empty() {
		return 0, "", false // released cleanly: nobody is named
	}
	data, err := l.ReadContent(limit)
	if err != nil || len(data) == 0 {
		return 0, "", false
	}
	id, fd, ok := parse(data)
	if !ok {
		return 0, "", false
	}
	holderPath, held := Elsewhere(id, fd, l.Path())
	if !held || !sameFile(l, id.PID, fd, data) {
		return 0, "", false
	}
	return id.PID, holderPath, true
}

// sameFile reports whether the lock file l, which this process holds, is
// the very file the descriptor fd of pid is open on, by a mark: random
// bytes, as long as what the file holds (old), written through l and read
// back through pid's descriptor. (As long, because a network or FUSE mount
// may still believe the file has its old length.) A copy of a lock file
// made while its holder ran (cp -a to another disk) carries the same
// identity, but never shows the mark. old is written back in any case: it
// is the other holder's when the file is shared, and a caller may still
// read it.
func sameFile(l *filelock.File, pid, fd int, old []byte) bool {
	mark := make([]byte, len(old))
	rand.Read(mark)
	for i := range mark {
		mark[i] = "0123456789abcdef"[mark[i]&15]
	}
	defer l.WriteContent(old)
	if l.WriteContent(mark) != nil {
		return false
	}
	seen, err := locktable.ReadThrough(pid, fd, len(mark))
	return err == nil && bytes.Equal(seen, mark)
}

// Pinned pins pid when it is alive and holds the lock on the file at path,
// checked after the pin (so the pinned process is the holder); else nil.
// The caller closes it.
func Pinned(pid int, path string) *liveness.Process {
	id, err := liveness.Lookup(pid)
	if err != nil {
		return nil
	}
	p, _, _ := liveness.Pin(id)
	if p == nil {
		return nil
	}
	ino, err := locktable.InodeOf(path)
	if err != nil || locktable.HeldBy(pid, ino) != locktable.Yes {
		p.Close()
		return nil
	}
	return p
}
