package filelock

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/runnerstate/runnerstate/internal/locktable"
)

// TryExclusive takes the exclusive lock of path (created 0600) without
// waiting for a holder, but tries again while the busy answer is only
// passing (see passage): at once and then after pauses that double from
// 50 µs to 5 ms, for as long as the only holders are probes that run
// (BusyProbing: evidence, however long the scheduler keeps a prober off a
// core), while nobody holds the lock for up to passingWait and at least
// passingTries tries (a try the scheduler delays is still made), or for
// five tries a millisecond apart where the holders cannot all be seen. It
// answers ErrWouldBlock when held; any other error is TryLock's.
func TryExclusive(path string) (*File, error) {
	l, err := TryLock(path, Exclusive, 0o600)
	if !errors.Is(err, ErrWouldBlock) {
		return l, err
	}
	state := passage(path, true)
	deadline, passed := time.Now().Add(passingWait), 0
	if fn := testHookPassing.Load(); fn != nil {
		(*fn)(state)
	}
	pause := 50 * time.Microsecond
	for try := 0; ; try++ {
		switch state {
		case BusyHeld:
			return nil, err
		case BusyMayBePassing:
			if try == 5 {
				return nil, err
			}
			pause = time.Millisecond
		case BusyPassing:
			if passed++; passed > passingTries && time.Now().After(deadline) {
				return nil, err
			}
		}
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
		if l, err = TryLock(path, Exclusive, 0o600); !errors.Is(err, ErrWouldBlock) {
			return l, err
		}
		switch next := passage(path, false); {
		case next == BusyHeld:
			state = BusyHeld
		case state == BusyMayBePassing:
		case next == BusyProbing:
			state = BusyProbing
		case state == BusyProbing:
			// A probe was seen to run until now: the time and tries left
			// to a lock nobody holds count from here.
			state, deadline, passed = BusyPassing, time.Now().Add(passingWait), 0
		}
	}
}

// testHookPassing, when set, is told how TryExclusive read a busy answer
// (passage) before it tries again.
var testHookPassing atomic.Pointer[func(state BusyAnswer)]

// SetPassingHook makes fn be told how TryExclusive read each busy answer
// (passage), before it tries again, and returns a func that removes it. For
// tests of the packages above this one; fn may be called from any
// goroutine.
func SetPassingHook(fn func(state BusyAnswer)) (restore func()) {
	old := testHookPassing.Swap(&fn)
	return func() { testHookPassing.Store(old) }
}

// passingWait bounds how long TryExclusive tries again a lock that nobody
// holds but the kernel has not let go yet: the last reference to a closed
// file, and so its lock, is a reader's of /proc/<pid>/fdinfo for the time
// of its read(2), which a loaded machine can stretch to milliseconds.
const passingWait = 250 * time.Millisecond

// passingTries is how many tries TryExclusive makes, at least, of a lock
// that nobody holds, however long they take: passingWait alone is a guess
// about the scheduler, which a loaded machine outlasts with this process
// off a core between two tries (an Acquire beside a prober in a container
// gave up after a single try that way: each probe's instant lock, met by a
// try, is gone by the look that follows it). Each try that fails met a new
// instant hold; twenty in a row do not happen beside a prober that holds the
// lock a small part of its time.
const passingTries = 20

// BusyAnswer is what a busy answer on a lock means, as TryExclusive reads
// it (passage).
type BusyAnswer int

const (
	BusyHeld         BusyAnswer = iota // a process holds the lock through a descriptor of its own
	BusyMayBePassing                   // nobody is seen to hold it, but not every holder can be seen
	BusyPassing                        // nobody holds it: it is on its way to being free
	BusyProbing                        // only probes that run hold it (shared, for an instant each)
)

// String names the answer, for logs and test failures.
func (b BusyAnswer) String() string {
	switch b {
	case BusyHeld:
		return "held"
	case BusyMayBePassing:
		return "may be passing"
	case BusyPassing:
		return "passing"
	case BusyProbing:
		return "probing"
	}
	return fmt.Sprintf("BusyAnswer(%d)", int(b))
}

// passage says whether the lock of path, found busy, is held or only
// passing, so that a try is worth making again. It is passing
//
//   - while a reader of the holder's /proc/<pid>/fdinfo (a probe) has the
//     holder's file, which the holder has just closed: the last reference
//     to a file drops its lock, and that is the reader's;
//   - while a probe's shared lock (taken by a process that cannot see the
//     holder in the kernel's list: in a container, or off Linux) is held,
//     for an instant: BusyProbing when the kernel lists only such locks and
//     each prober runs (locktable.ProbeOf), which is evidence that it lets
//     go however long the scheduler keeps it off a core; passing, under
//     passingWait, when a prober is asleep, gone or cannot be read;
//   - while the kernel names this process as the holder and this process
//     has a parked goroutine (Lock) for path whose wait was given up: that
//     goroutine holds it only on its way to letting it go (InTransit).
//
// It is held when the kernel lists an exclusive holder that shows the lock
// among its own descriptors, or one whose descriptors cannot be read
// (another user's), or a shared holder through a descriptor that is not a
// probe's; and, with scan set, where every process can be seen,
// when a scan of every process's descriptors finds one that holds it (such
// as the runner's children that inherited tree.lock). It may be passing
// when it is neither, but not every holder can be seen.
func passage(path string, scan bool) BusyAnswer {
	ino, err := locktable.InodeOf(path)
	if err != nil {
		return BusyMayBePassing
	}
	holders, _ := locktable.HoldersOf(ino) // where the kernel lists none, any busy answer may be passing
	probing, notProbing := false, false
	for _, h := range holders {
		if !h.Exclusive {
			switch locktable.ProbeOf(h.PID, ino) {
			case locktable.ProbeNot:
				return BusyHeld
			case locktable.ProbeRunning:
				probing = true
			case locktable.ProbeAsleep, locktable.ProbeUnknown:
				notProbing = true
			}
			continue
		}
		if locktable.HeldBy(h.PID, ino) != locktable.No {
			if h.PID == os.Getpid() && InTransit(path) {
				return BusyPassing // this process's own given-up wait, about to let go
			}
			return BusyHeld
		}
	}
	if !locktable.SeesAllHolders() {
		return BusyMayBePassing
	}
	passing := BusyPassing
	if probing && !notProbing {
		passing = BusyProbing
	}
	if !scan {
		return passing
	}
	switch pids, complete := locktable.ScanHolders(ino); {
	case len(pids) > 0:
		return BusyHeld
	case !complete:
		return BusyMayBePassing
	}
	return passing
}
