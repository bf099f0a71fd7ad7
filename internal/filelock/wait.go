package filelock

import (
	"context"
	"errors"
	"io/fs"
	"runtime"
	"sync"
	"sync/atomic"
)

// Lock waits until the file at path is locked in mode, creating it with
// perm when it does not exist, or until ctx ends: then it returns an
// *fs.PathError whose Err satisfies errors.Is for both ErrWouldBlock and
// ctx.Err(). A ctx already ended gets one try without waiting.
//
// A blocked flock(2) cannot be cancelled (signals restart it; closing the
// descriptor does not wake it), and polling costs latency, so one goroutine
// per path and mode per process sits in a blocking lock on a descriptor of
// its own: the kernel wakes it the instant the holder releases, and it hands
// the lock to the first in-process waiter still waiting; when nobody waits
// any more it releases the lock at once and exits. In-process waiters wait
// on a channel, never in a syscall of their own, so cancelling a wait is
// immediate. A cancelled wait may leave that goroutine blocked until the
// holder releases; it never recreates the file. The shape follows
// juju/mutex's single blocked locker per name (https://github.com/juju/mutex),
// with a FIFO queue in front of it.
func Lock(ctx context.Context, path string, mode Mode, perm fs.FileMode) (*File, error) {
	f, err := tryLock(path, mode, perm)
	if !errors.Is(err, ErrWouldBlock) {
		return f, err
	}
	if ctx.Err() != nil {
		f.Release()
		return nil, ended(path, ctx.Err())
	}
	return parked.wait(ctx, key{path, mode}, perm, f)
}

// ended is the answer of a wait that ended with the lock still held.
func ended(path string, cause error) error {
	return &fs.PathError{Op: "lock", Path: path, Err: &endedError{cause}}
}

// endedError is ErrWouldBlock for a wait whose context ended.
type endedError struct{ cause error }

func (e *endedError) Error() string        { return ErrWouldBlock.Error() + ": " + e.cause.Error() }
func (e *endedError) Is(target error) bool { return target == ErrWouldBlock }
func (e *endedError) Unwrap() error        { return e.cause }

type key struct {
	path string
	mode Mode
}

// handoff is what a waiter receives: the lock, or the error that ended the
// parked goroutine.
type handoff struct {
	f   *File
	err error
}

type waiter struct{ ch chan handoff }

type queue struct {
	perm    fs.FileMode // to create the file with, should the parked goroutine open it
	waiters []*waiter
}

// pop removes and returns the first waiter.
func (q *queue) pop() *waiter {
	w := q.waiters[0]
	copy(q.waiters, q.waiters[1:])
	q.waiters[len(q.waiters)-1] = nil
	q.waiters = q.waiters[:len(q.waiters)-1]
	return w
}

// remove removes w, reporting whether it was still queued.
func (q *queue) remove(w *waiter) bool {
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

type table struct {
	mu     sync.Mutex
	queues map[key]*queue
}

var parked = &table{queues: make(map[key]*queue)}

// wait queues for the lock of k.path. spare is an open, unlocked File of
// the path (from the failed try): a new parked goroutine blocks on it
// instead of opening the file again; otherwise it is closed.
func (t *table) wait(ctx context.Context, k key, perm fs.FileMode, spare *File) (*File, error) {
	w := &waiter{ch: make(chan handoff, 1)}
	t.mu.Lock()
	q := t.queues[k]
	if q == nil {
		q = &queue{perm: perm}
		t.queues[k] = q
		go t.park(k, q, spare)
		spare = nil
	}
	q.waiters = append(q.waiters, w)
	t.mu.Unlock()
	if spare != nil {
		spare.Release()
	}
	if fn := testHookQueued.Load(); fn != nil {
		(*fn)(func() bool { return len(w.ch) > 0 })
	}

	select {
	case r := <-w.ch:
		return r.f, r.err
	case <-ctx.Done():
	}
	t.mu.Lock()
	removed := q.remove(w)
	t.mu.Unlock()
	if removed {
		return nil, ended(k.path, ctx.Err())
	}
	// Handed off at the same instant the context ended: the lock is the
	// caller's, who decides what to do with it.
	r := <-w.ch
	return r.f, r.err
}

// park is the parked goroutine of one path and mode. spare, when not nil,
// is the File to block on first.
func (t *table) park(k key, q *queue, spare *File) {
	for {
		if t.abandoned(k, q) {
			if spare != nil {
				spare.Release()
			}
			return
		}
		if fn := testHookGot.Load(); fn != nil {
			(*fn)(false)
		}
		f, err := t.block(k, q.perm, spare)
		spare = nil
		if err == errRetry {
			continue
		}
		if fn := testHookGot.Load(); err == nil && fn != nil {
			(*fn)(true)
		}
		if !t.handOff(k, q, f, err) {
			return
		}
		// Let the waiter, now first in this P's run queue, run at once: left
		// for a moment, it is stolen by another P whose thread must first be
		// woken, which measured ~2x the whole handoff on a 2-vCPU VM.
		runtime.Gosched()
	}
}

// errRetry says the file was replaced while the parked goroutine blocked on
// it: lock the file now at the path instead.
var errRetry = errors.New("retry")

// block takes the lock of k.path, blocking in the kernel, on spare when
// there is one.
func (t *table) block(k key, perm fs.FileMode, spare *File) (*File, error) {
	f := spare
	if f == nil {
		var err error
		if f, err = open(k.path, k.mode, perm); err != nil {
			return nil, err
		}
	}
	if err := f.lock(true); err != nil {
		f.Release()
		return nil, err
	}
	same, err := f.AtPath()
	if err != nil || !same {
		f.Release()
		if err == nil {
			err = errRetry
		}
		return nil, err
	}
	if err := f.judge(true); err != nil {
		f.Release()
		return nil, err
	}
	return f, nil
}

// abandoned reports, removing the queue, whether nobody waits on q any more.
func (t *table) abandoned(k key, q *queue) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(q.waiters) > 0 {
		return false
	}
	delete(t.queues, k)
	return true
}

// handOff gives the first waiter the lock f, or every waiter err. It
// reports whether the parked goroutine goes on.
func (t *table) handOff(k key, q *queue, f *File, err error) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case len(q.waiters) == 0:
		if f != nil {
			f.Release()
		}
		delete(t.queues, k)
		return false
	case err != nil:
		for _, w := range q.waiters {
			w.ch <- handoff{err: err}
		}
		q.waiters = nil
		delete(t.queues, k)
		return false
	}
	q.pop().ch <- handoff{f: f}
	return true
}

// InTransit reports whether this process has a parked goroutine for path
// that nobody waits on any more: a wait whose context ended leaves it
// blocked, and when the holder lets go it takes the lock only to release it
// at once. A lock this process is seen to hold while InTransit is true is
// that goroutine's, on its way to being let go (or, rarely, this process's
// own through another descriptor, which a second look still finds held).
func InTransit(path string) bool {
	parked.mu.Lock()
	defer parked.mu.Unlock()
	for _, m := range []Mode{Exclusive, Shared} {
		if q := parked.queues[key{path, m}]; q != nil && len(q.waiters) == 0 {
			return true
		}
	}
	return false
}

// testHookGot, when set, is called by a parked goroutine before it blocks
// for the lock (got false), and once it holds it, before it hands it over
// or lets it go (got true).
var testHookGot atomic.Pointer[func(got bool)]

// SetGotHook makes fn be called by every parked goroutine before it blocks
// in the kernel for its lock (got false: from then on it no longer looks
// whether anyone waits until it has the lock), and once it has taken it,
// before it hands it over or lets it go (got true); it returns a func that
// removes the hook. For tests that hold the lock in transit.
func SetGotHook(fn func(got bool)) (restore func()) {
	old := testHookGot.Swap(&fn)
	return func() { testHookGot.Store(old) }
}

// testHookQueued, when set, is called by a waiter once it is queued, with a
// func that reports whether its lock has been handed off.
var testHookQueued atomic.Pointer[func(handedOff func() bool)]

// SetQueuedHook makes fn be called by every waiter once it is queued, with
// a func that reports whether the lock has been handed off to it, and
// returns a func that removes the hook. For tests that make a handoff and
// the end of a context cross.
func SetQueuedHook(fn func(handedOff func() bool)) (restore func()) {
	old := testHookQueued.Swap(&fn)
	return func() { testHookQueued.Store(old) }
}

// Parked reports how many parked goroutines exist, for tests that account
// for the goroutine a cancelled wait may leave.
func Parked() int {
	parked.mu.Lock()
	defer parked.mu.Unlock()
	return len(parked.queues)
}

// Queued reports how many in-process waiters queue for the lock of path in
// mode, for tests.
func Queued(path string, mode Mode) int {
	parked.mu.Lock()
	defer parked.mu.Unlock()
	if q := parked.queues[key{path, mode}]; q != nil {
		return len(q.waiters)
	}
	return 0
}
