package runnerstate

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate/internal/filelock"
)

// withStateLock runs fn holding dir's state lock: an exclusive flock on
// dir/.state.lock. It serialises read-modify-write of state files across
// goroutines and processes. The wait is bounded by stateLockWait.
func withStateLock(dir string, fn func(held stateHeld) error) error {
	return withStateLockCtx(context.Background(), dir, fn)
}

// withStateLockCtx is withStateLock whose wait also ends with ctx.
//
// fn is given the token that says the lock is held (stateHeld), which the
// *Locked helpers take. The lock is not reentrant: code that holds the
// token never asks for the lock again, and a test holds it to that
// (TestStateLockIsNeverAskedForUnderIt walks the code).
func withStateLockCtx(ctx context.Context, dir string, fn func(held stateHeld) error) error {
	waitCtx, cancel := context.WithTimeout(ctx, stateLockWait)
	defer cancel()
	path := filepath.Join(dir, stateLockName)
	l, err := waitLock(waitCtx, path, filelock.Exclusive, 0o600, inspectLock)
	if err != nil {
		if errors.Is(err, ErrBusy) && ctx.Err() == nil && waitCtx.Err() != nil {
			return errorf("waited %v for the state lock %s: %w", stateLockWait, path, err)
		}
		return err
	}
	defer l.Release()
	if err := ownedLock("write", dir, path, l.Fd()); err != nil {
		return err // another user's: it serialises nothing, and fn writes nothing
	}
	l.MakePrivate() // 0600: a reader's flock on it must never stall writers (one made by an older build was 0644)
	return fn(stateHeld{dir: dir})
}

// stateHeld is the token of a held state lock: withStateLockCtx hands it to
// the code it runs, and the *Locked helpers take it instead of a directory,
// so that what needs the lock says so in its signature and cannot be
// reached without it.
type stateHeld struct {
	dir string // the directory whose state lock is held
}

// stateLockWait bounds the wait for a directory's state lock, which is held
// for one read-modify-write of the state files: a few small writes, and the
// reads of /proc that decide them (a takeover's admission, say).
const stateLockWait = 30 * time.Second
