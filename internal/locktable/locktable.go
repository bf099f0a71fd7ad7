// Package locktable reads the kernel's view of who holds a file's flock,
// without touching the lock: the kernel's lock list (/proc/locks), what a
// process's descriptor is open on and the locks it carries (/proc/<pid>/fd
// and fdinfo), and a scan of every process's descriptors. A look that
// locked, even shared, would make a concurrent LOCK_EX|LOCK_NB fail; nothing
// here locks.
//
// Only Linux shows any of it. Elsewhere every answer is "cannot tell"
// (Unknown, known false, complete false), and a caller probes the lock
// instead (filelock.ProbeHeld). A lock listed was held; "none listed" is the
// truth only when Holders says it is known.
//
// What a path or a pid means is the caller's: nothing here knows the files
// of a runner directory, and nothing logs.
package locktable

// Holder is one granted lock the kernel lists for a file.
type Holder struct {
	// PID is the process that took the lock, as seen from this process's
	// PID namespace; 0 when it is not visible from here.
	PID int
	// Exclusive is a write lock (a shared one otherwise).
	Exclusive bool
	// DevMatch says the device numbers matched too, not only the inode.
	// On btrfs subvolumes and overlayfs stat(2) reports another device
	// than the kernel's lock list, so a caller corroborates an entry that
	// matches by inode only.
	DevMatch bool
}

// holdsExclusive reports whether pid is an exclusive holder in holders.
func holdsExclusive(holders []Holder, pid int) bool {
	for _, h := range holders {
		if h.Exclusive && h.PID == pid {
			return true
		}
	}
	return false
}

// HoldsExclusive reports whether the kernel lists pid as an exclusive holder
// of the lock of the file at path. Where the kernel lists no holders it
// reports known false.
func HoldsExclusive(path string, pid int) (holds, known bool) {
	holders, _, known := Holders(path)
	return holdsExclusive(holders, pid), known
}

// StillHolds reports whether pid still holds the lock of path as far as
// the kernel tells: exactly from the process's own descriptors when they
// can be read (HeldBy), else from the kernel's lock list (HoldsExclusive);
// true where the kernel tells nothing (whatever verified pid before is
// then all there is).
func StillHolds(path string, pid int) bool {
	if ino, err := InodeOf(path); err == nil {
		switch HeldBy(pid, ino) {
		case Yes:
			return true
		case No:
			return false
		}
	}
	holds, known := HoldsExclusive(path, pid)
	return holds || !known
}

// Probe is how a process that the kernel lists with a shared lock on a file
// holds it (ProbeOf).
type Probe uint8

const (
	// ProbeUnknown: the process's descriptors cannot be read here (another
	// user's, hidepid, gone, or not Linux).
	ProbeUnknown Probe = iota
	// ProbeGone: no descriptor of the process holds a shared lock on the
	// file any more: it let go since the list was read.
	ProbeGone
	// ProbeRunning: it holds the lock only through a probe's descriptor
	// (read-only, opened O_NONBLOCK|O_NOFOLLOW, as filelock.ProbeHeld
	// opens it) and a thread of it is running, runnable or in an
	// uninterruptible wait: a probe on its way to letting go.
	ProbeRunning
	// ProbeAsleep: it holds the lock only through a probe's descriptor but
	// every thread of it is asleep or stopped: not a probe in flight.
	ProbeAsleep
	// ProbeNot: it holds the lock through a descriptor that is not a
	// probe's: a holder.
	ProbeNot
)
