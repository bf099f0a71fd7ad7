package runnerstate

import (
	"context"
	"errors"
	"io/fs"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
)

// TrustFilesystem adds filesystem types, as /proc/self/mountinfo names them
// (fuse.gocryptfs, fuseblk, nfs4...; on macOS f_fstypename; on Windows
// "remote" or "unc"), to the types whose locks this process trusts to
// exclude, and returns a func that restores the list as it was (for
// tests). The environment variable RUNNERSTATE_TRUST_FS (comma-separated
// type names, read when the first such filesystem is judged) starts the
// list. Trust a type only when every process reaches the directory through
// one mount on one machine: two machines on a trusted network filesystem
// are not excluded (use the etcd module). On Linux the runner lock's
// cross-check still refuses a lock proven not to exclude. Safe for
// concurrent use.
func TrustFilesystem(types ...string) (restore func()) { return fsinfo.Trust(types...) }

// Lock takes an exclusive lock on the file at path, creating it (0644) if it
// does not exist, and waits until it is free or ctx ends. The returned unlock
// func releases the lock; it is idempotent and safe to call from any
// goroutine. Two Lock calls on one path exclude each other inside one process
// just as they do across processes. The file is opened and checked as
// docs/protocol.md's conventions say: close-on-exec (children never inherit
// the lock), never through a symlink, never truncated nor unlinked, and taken
// again when it was replaced while Lock locked it.
//
// Errors: when ctx ends first, a *BusyError that satisfies errors.Is for both
// ErrBusy and ctx.Err(); a filesystem without locks gives ErrLockingUnsupported;
// a symlink, a directory or another non-regular file at path gives an error
// naming path; anything else is the system's error naming path.
//
// The context: ctx bounds the wait. A ctx that has already ended when Lock is
// called still gets one try without waiting (the way to ask once). Once
// Lock has begun with a live ctx, it never succeeds after ctx ends: a lock
// handed off at the instant ctx ends is let go at once, and Lock returns
// the *BusyError wrapping ctx.Err() it would have returned a moment earlier.
// So a nil error means the lock is held and ctx did not end while Lock
// waited. ctx can still end the instant after Lock returns: a caller that
// cancels ctx to stop (on SIGTERM, say) looks at its own stop cause after a
// successful return too.
//
// A wait that ends early may leave a goroutine blocked in flock(2) until the
// holder releases: docs/guarantees.md ("What is not promised") says what it
// does then.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	l, err := waitLock(ctx, path, filelock.Exclusive, 0o644, inspectByName)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// TryLock takes an exclusive lock on the file at path like Lock, without
// waiting: when the lock is held it returns a *BusyError naming the holder.
// After a Lock of this process gave up waiting, its parked goroutine takes
// the lock for an instant when the holder releases it (and lets it go at
// once); a TryLock in that instant is refused.
func TryLock(path string) (unlock func(), err error) {
	l, err := tryLock(path, filelock.Exclusive, 0o644, inspectByName)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// RLock takes a shared lock on the file at path, creating it (0644) if it does
// not exist, and waits until no exclusive lock is held or ctx ends. Shared
// locks coexist with each other and exclude Lock and TryLock. It needs only
// read permission on the file. Errors, waiting and the context are as for
// Lock.
func RLock(ctx context.Context, path string) (unlock func(), err error) {
	l, err := waitLock(ctx, path, filelock.Shared, 0o644, inspectByName)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// TryRLock takes a shared lock on the file at path like RLock, without
// waiting: when an exclusive lock is held it returns a *BusyError.
func TryRLock(path string) (unlock func(), err error) {
	l, err := tryLock(path, filelock.Shared, 0o644, inspectByName)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// tryLock makes one try, without waiting: a *BusyError, naming the holder
// as inspect reads it, when the lock is held.
func tryLock(path string, mode filelock.Mode, perm fs.FileMode, inspect inspector) (*filelock.File, error) {
	l, err := filelock.TryLock(path, mode, perm)
	if errors.Is(err, filelock.ErrWouldBlock) {
		return nil, busyError(path, nil, inspect)
	}
	return l, public(err)
}

// waitLock waits for the lock until ctx ends (see Lock for the context's
// rules): a *BusyError wrapping ctx.Err(), naming the holder as inspect reads
// it, when it ends first.
func waitLock(ctx context.Context, path string, mode filelock.Mode, perm fs.FileMode, inspect inspector) (*filelock.File, error) {
	live := ctx.Err() == nil
	l, err := filelock.Lock(ctx, path, mode, perm)
	if errors.Is(err, filelock.ErrWouldBlock) {
		return nil, busyError(path, ctx.Err(), inspect)
	}
	if err != nil {
		return nil, public(err)
	}
	if err := keepIfLive(ctx, live, path, l.Release); err != nil {
		return nil, err
	}
	return l, nil
}

// keepIfLive is the last step of every call that waits with a context: when
// the call began with a live ctx that has ended since, what was just taken
// is let go (by release) and the answer is the busy one, so that a call never
// succeeds after its context ended. A call that began with an ended ctx made
// its one try knowingly and keeps what it got.
func keepIfLive(ctx context.Context, live bool, path string, release func()) error {
	if !live || ctx.Err() == nil {
		return nil
	}
	release()
	return &BusyError{Path: path, cause: ctx.Err(), letGo: true}
}
