package runnerstate

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/runnerstate/runnerstate/internal/filelock"
)

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
	if stateLockEntries.Held(key) {
		return errorf("state lock %s asked for again by the code that holds it, which would wait for itself; this is a bug in runnerstate, please report it: %w", path, errStateLockReentered)
	}
	l, err := waitLock(waitCtx, path, filelock.Exclusive, 0o600, inspectLock)
	if err != nil {
		if errors.Is(err, ErrBusy) && ctx.Err() == nil && waitCtx.Err() != nil {
			return errorf("state lock %s stayed busy for %v; a process is stuck writing state there (stopped?): %w", path, stateLockWait, err)
		}
		return err
	}
	defer l.Release()
	l.MakePrivate() // 0600: a reader's flock on it must never stall writers (one made by an older build was 0644)
	defer stateLockEntries.Enter(key)()
	return fn()
}

// stateLockEntries knows which goroutine holds each state lock this process
// holds (by its absolute path), so that withStateLockCtx refuses re-entry.
var stateLockEntries reentryGuard

// errStateLockReentered is what withStateLockCtx refuses a re-entry with.
var errStateLockReentered = errors.New("state lock is not reentrant")

// stateLockWait bounds the wait for a directory's state lock, which is held
// for one read-modify-write of the state files: a few small writes, and the
// reads of /proc that decide them (a takeover's admission, say).
const stateLockWait = 30 * time.Second

// reentryGuard records, for each key held, the goroutine that holds it, so
// that a non-reentrant lock taken again by the goroutine that holds it fails
// at once instead of waiting for itself. The zero reentryGuard can be used as
// is; it is safe for concurrent use.
//
// Go gives goroutines no identity on purpose; this reads the id the runtime
// prints at the head of a goroutine's stack trace (goroutineID), and uses it
// for nothing but this check. It costs one runtime.Stack call of a few dozen
// bytes per Held or Enter.
type reentryGuard struct {
	mu      sync.Mutex
	entries map[string]uint64
}

// Held reports whether the calling goroutine holds key (entered and not yet
// left). Another goroutine's entry of key is not reported.
func (g *reentryGuard) Held(key string) bool {
	id := goroutineID()
	g.mu.Lock()
	defer g.mu.Unlock()
	by, ok := g.entries[key]
	return ok && by == id
}

// Enter records that the calling goroutine holds key, and returns the func
// that records it no longer does. The caller must already exclude every
// other holder of key (it holds the lock key names): Enter does not wait.
func (g *reentryGuard) Enter(key string) (leave func()) {
	id := goroutineID()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.entries == nil {
		g.entries = make(map[string]uint64)
	}
	g.entries[key] = id
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.entries[key] == id {
			delete(g.entries, key)
		}
	}
}

// goroutineID returns the calling goroutine's id, from the first line of its
// stack trace ("goroutine 7 [running]:"); 0 if that cannot be read.
func goroutineID() uint64 {
	var buf [64]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
