package runnerstate

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// ErrBusy reports that a lock is held by someone else. Every busy answer is a
// *BusyError that names the holder as far as it is known; test for it with
// errors.Is(err, ErrBusy).
var ErrBusy = errors.New("runnerstate: lock is held by another process")

// ErrLockingUnsupported reports a filesystem that refuses file locks (ENOLCK,
// EOPNOTSUPP: some network and FUSE filesystems). Without working locks no
// exclusion can be promised, so nothing proceeds: move the directory to a local
// disk.
var ErrLockingUnsupported = errors.New("runnerstate: file locking is not supported on this filesystem; move it to a local disk")

// errWouldBlock is the internal answer of a non-blocking lock attempt that
// found the lock taken. The public functions turn it into a *BusyError.
var errWouldBlock = errors.New("runnerstate: lock would block")

// BusyError is the answer of every lock attempt that found the lock held. The
// holder fields are hints read at the moment of refusal (by the time you read
// them the holder may have gone): PID is the holder's pid when known, else 0;
// Verified says that pid's identity (pid, start ticks, boot id, PID namespace)
// was confirmed alive, so it is not a recycled pid; Owner names what the holder
// serves when known (the data dir of a scope owner, see AcquireScope).
//
// errors.Is(err, ErrBusy) is true for every *BusyError, and on Unix so is
// errors.Is(err, syscall.EWOULDBLOCK). A wait that ended because its context
// ended also wraps the context's error, so errors.Is(err,
// context.DeadlineExceeded) or errors.Is(err, context.Canceled) holds too.
type BusyError struct {
	Path     string // the lock file
	PID      int    // holder's pid when known, else 0
	Verified bool   // PID's identity confirmed alive
	Owner    string // what the holder serves, when known (a scope's data dir)

	cause error // the context's error when a wait ended with the lock still busy
	letGo bool  // the lock was taken as the context ended, and let go at once
}

// Error names the lock file, the holder as far as it is known, and why the
// wait ended when it was a wait.
func (e *BusyError) Error() string {
	var b strings.Builder
	b.WriteString("runnerstate: ")
	b.WriteString(e.Path)
	if e.letGo {
		b.WriteString(" was let go as soon as it was taken: the context had ended")
		if e.cause != nil {
			b.WriteString(": ")
			b.WriteString(e.cause.Error())
		}
		return b.String()
	}
	b.WriteString(" is locked by ")
	switch {
	case e.PID > 0:
		b.WriteString("pid ")
		b.WriteString(strconv.Itoa(e.PID))
		if e.Verified {
			b.WriteString(" (verified alive)")
		} else {
			b.WriteString(" (unverified)")
		}
	default:
		b.WriteString("another process")
	}
	if e.Owner != "" {
		b.WriteString(" serving ")
		b.WriteString(e.Owner)
	}
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	return b.String()
}

// Is reports whether target is ErrBusy or, on Unix, syscall.EWOULDBLOCK.
func (e *BusyError) Is(target error) bool {
	return target == ErrBusy || (wouldBlockErrno != nil && target == wouldBlockErrno)
}

// Unwrap returns the context's error when a wait ended with the lock busy,
// else nil.
func (e *BusyError) Unwrap() error { return e.cause }

// lockKind selects what is opened and how it is locked.
type lockKind uint8

const (
	kindExclusive lockKind = iota // a lock file, exclusive lock
	kindShared                    // a lock file, shared lock
	kindDir                       // a directory, exclusive lock (the state-file mutex)
)

func (k lockKind) exclusive() bool { return k != kindShared }

// maxReplaced bounds how often a lock attempt retries when the file it locked
// was replaced or unlinked under it. Each retry means somebody else is
// deleting the lock file; a handful of rounds tells a race from a loop.
const maxReplaced = 16

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
	return lockWait(ctx, path, kindExclusive)
}

// TryLock takes an exclusive lock on the file at path like Lock, without
// waiting: when the lock is held it returns a *BusyError naming the holder.
// After a Lock of this process gave up waiting, its parked goroutine takes
// the lock for an instant when the holder releases it (and lets it go at
// once); a TryLock in that instant is refused.
func TryLock(path string) (unlock func(), err error) {
	return lockTry(path, kindExclusive)
}

// RLock takes a shared lock on the file at path, creating it (0644) if it does
// not exist, and waits until no exclusive lock is held or ctx ends. Shared
// locks coexist with each other and exclude Lock and TryLock. It needs only
// read permission on the file. Errors, waiting and the context are as for
// Lock.
func RLock(ctx context.Context, path string) (unlock func(), err error) {
	return lockWait(ctx, path, kindShared)
}

// TryRLock takes a shared lock on the file at path like RLock, without
// waiting: when an exclusive lock is held it returns a *BusyError.
func TryRLock(path string) (unlock func(), err error) {
	return lockTry(path, kindShared)
}

func lockTry(path string, kind lockKind) (func(), error) {
	l, err := acquireNB(path, kind)
	if err != nil {
		if err == errWouldBlock {
			return nil, busyError(path, nil)
		}
		return nil, err
	}
	return l.release, nil
}

func lockWait(ctx context.Context, path string, kind lockKind) (func(), error) {
	l, err := acquireWait(ctx, path, kind)
	if err != nil {
		return nil, err
	}
	return l.release, nil
}

// acquireNB makes one non-blocking attempt: errWouldBlock when busy.
func acquireNB(path string, kind lockKind) (*lockFile, error) {
	l, err := tryAcquire(path, kind)
	if err == errWouldBlock {
		l.release()
		return nil, err
	}
	return l, err
}

// tryAcquire is acquireNB, but on errWouldBlock it also returns the open,
// unlocked descriptor, for a waiter to block on without opening again.
func tryAcquire(path string, kind lockKind) (*lockFile, error) {
	for attempt := 0; ; attempt++ {
		l, err := openLockFile(path, kind)
		if err != nil {
			return nil, err
		}
		if err := l.lock(kind.exclusive(), false); err != nil {
			if err == errWouldBlock {
				return l, err
			}
			l.release()
			return nil, err
		}
		same, err := l.atPath(kind)
		if err != nil {
			l.release()
			return nil, err
		}
		if same {
			return l, nil
		}
		l.release()
		if attempt >= maxReplaced {
			return nil, pathError("lock", path, errReplaced)
		}
	}
}

var errReplaced = errors.New("the lock file keeps being replaced or removed while it is locked; stop whatever deletes it")

// acquireWait tries once, then queues behind the path's parked waiter until
// the lock is handed over or ctx ends. A ctx already ended on entry gets that
// one attempt; a ctx that ends after entry never gets the lock (see Lock).
func acquireWait(ctx context.Context, path string, kind lockKind) (*lockFile, error) {
	live := ctx.Err() == nil
	l, err := tryAcquire(path, kind)
	if err == errWouldBlock {
		if !live || ctx.Err() != nil {
			l.release()
			return nil, busyError(path, ctx.Err())
		}
		l, err = parked.wait(ctx, path, kind, l)
	}
	if err != nil {
		return nil, err
	}
	if err := keepIfLive(ctx, live, path, l.release); err != nil {
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

// busyError describes the holder of path as far as the kernel and the lock
// file's content tell. cause is the context's error when a wait ended.
func busyError(path string, cause error) *BusyError {
	st := inspectLock(path)
	return &BusyError{Path: path, PID: st.pid, Verified: st.verified, cause: cause}
}

// The parked waiters. For each path and lock kind at most one goroutine per
// process sits in a blocking flock(2) on a descriptor of its own; the kernel
// wakes it the instant the holder releases, and it hands the lock to the first
// in-process waiter still waiting. When nobody waits any more it releases the
// lock at once and exits. In-process waiters wait on a channel, never in a
// syscall of their own, so cancelling a wait is immediate.
//
// The shape follows juju/mutex's single blocked locker per name
// (https://github.com/juju/mutex), with a FIFO queue in front of it.
type parkKey struct {
	path string
	kind lockKind
}

type parkResult struct {
	l   *lockFile
	err error
}

type parkWaiter struct{ ch chan parkResult }

type parkQueue struct{ waiters []*parkWaiter }

type parkTable struct {
	mu     sync.Mutex
	queues map[parkKey]*parkQueue
}

var parked = &parkTable{queues: make(map[parkKey]*parkQueue)}

// wait queues for the lock of path. spare is an open, unlocked descriptor of
// path (from the failed attempt): a new parked goroutine blocks on it instead
// of opening the file again; otherwise it is closed.
func (t *parkTable) wait(ctx context.Context, path string, kind lockKind, spare *lockFile) (*lockFile, error) {
	w := &parkWaiter{ch: make(chan parkResult, 1)}
	key := parkKey{path, kind}
	t.mu.Lock()
	q := t.queues[key]
	if q == nil {
		q = &parkQueue{}
		t.queues[key] = q
		go t.run(key, q, spare)
		spare = nil
	}
	q.waiters = append(q.waiters, w)
	t.mu.Unlock()
	if spare != nil {
		spare.release()
	}
	if testHookParked != nil {
		testHookParked(w.ch)
	}

	select {
	case r := <-w.ch:
		return r.l, r.err
	case <-ctx.Done():
	}
	t.mu.Lock()
	removed := q.remove(w)
	t.mu.Unlock()
	if removed {
		return nil, busyError(path, ctx.Err())
	}
	// Handed over at the same instant the context ended: the lock is ours
	// here, and acquireWait lets it go again.
	r := <-w.ch
	return r.l, r.err
}

func (q *parkQueue) remove(w *parkWaiter) bool {
	for i, x := range q.waiters {
		if x == w {
			copy(q.waiters[i:], q.waiters[i+1:])
			q.waiters[len(q.waiters)-1] = nil
			q.waiters = q.waiters[:len(q.waiters)-1]
			return true
		}
	}
	return false
}

// run is the parked goroutine of one path and kind. spare, when not nil, is
// the descriptor to block on first.
func (t *parkTable) run(key parkKey, q *parkQueue, spare *lockFile) {
	for {
		t.mu.Lock()
		if len(q.waiters) == 0 {
			delete(t.queues, key)
			t.mu.Unlock()
			if spare != nil {
				spare.release()
			}
			return
		}
		t.mu.Unlock()

		l, err := spare, error(nil)
		spare = nil
		if l == nil {
			l, err = openLockFile(key.path, key.kind)
		}
		if err == nil {
			err = l.lock(key.kind.exclusive(), true)
			if err == nil {
				var same bool
				same, err = l.atPath(key.kind)
				if err == nil && !same {
					l.release()
					continue // replaced while we waited: try the file now at path, if anyone still waits
				}
			}
			if err != nil {
				l.release()
				l = nil
			}
		}

		t.mu.Lock()
		switch {
		case len(q.waiters) == 0:
			if l != nil {
				l.release()
			}
			delete(t.queues, key)
			t.mu.Unlock()
			return
		case err != nil:
			for _, w := range q.waiters {
				w.ch <- parkResult{err: err}
			}
			q.waiters = nil
			delete(t.queues, key)
			t.mu.Unlock()
			return
		}
		w := q.waiters[0]
		copy(q.waiters, q.waiters[1:])
		q.waiters[len(q.waiters)-1] = nil
		q.waiters = q.waiters[:len(q.waiters)-1]
		w.ch <- parkResult{l: l}
		t.mu.Unlock()
		// Let the waiter, now first in this P's run queue, run at once: left
		// for a moment, it is stolen by another P whose thread must first be
		// woken, which measured ~2x the whole handoff on a 2-vCPU VM.
		runtime.Gosched()
	}
}

// testHookParked, when set, is called by a waiter once it is queued, with
// the channel its lock will be handed over on; tests use it to make a
// handoff and the end of the context cross. nil in production.
var testHookParked func(handoff <-chan parkResult)

// parkedCount reports how many parked goroutines exist (for tests).
func (t *parkTable) parkedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queues)
}

// queueLen reports how many in-process waiters queue for path and kind (for
// tests).
func (t *parkTable) queueLen(path string, kind lockKind) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if q := t.queues[parkKey{path, kind}]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// unsupportedError is the answer for a filesystem that refuses locks.
func unsupportedError(path string, errno error) error {
	return fmt.Errorf("runnerstate: lock %s: %w (%w)", path, ErrLockingUnsupported, errno)
}
