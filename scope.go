package runnerstate

import (
	"context"
	"errors"
	"path/filepath"
	"sync"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/locktable"
)

// One server per scope: several would-be servers share a scope directory and
// only one may serve at a time (AcquireScope). The refused one learns which
// data dir the other serves from a sidecar file beside the lock. The sync
// mark, the other shape besides the runner lock, is in syncmark.go.

// ScopeOwner is what the holder of a scope writes into scope.owner.json
// beside scope.lock: the data dir it serves and who it is.
//
// Trust: a ScopeOwner is a hint that names the holder in a refusal message,
// nothing more. It is never liveness evidence: a holder killed with SIGKILL
// leaves its ScopeOwner behind until the next holder replaces it, while the
// kernel lock it held is already free. Ask the lock, not this file, whether a
// server is running.
type ScopeOwner struct {
	DataDir string   `json:"data_dir"`         // the data dir the holder serves, absolute
	PID     int      `json:"pid"`              // the holder's pid, as seen in its PID namespace
	Process Identity `json:"process,omitzero"` // the holder's full identity
}

// AcquireScope makes this process the one server of scopeDir, serving
// dataDir. It creates scopeDir (0700, with its parents) when it does not
// exist, takes the exclusive kernel lock on scopeDir/scope.lock, waiting
// until it is free or ctx ends, writes this process's Identity into the lock
// file (except on Windows, where a locked file cannot be read), and then
// writes scope.owner.json (a ScopeOwner with dataDir made absolute)
// atomically, as docs/protocol.md says. dataDir is neither created nor
// touched.
//
// release removes scope.owner.json first, then clears the lock file's content
// and frees the lock, so a successor never finds the lock free while the
// sidecar still names this process. It is idempotent. A process that dies
// without calling release has the lock freed at once all the same; the next
// holder replaces the sidecar it left, and takes the scope without waiting.
//
// Errors:
//   - The scope is held and ctx ends first: a *BusyError naming scope.lock
//     and the holder's pid as far as it is known, with Owner set to the data
//     dir the holder serves when scope.owner.json can be read and names the
//     holder's pid, where that is known, and not a process provably gone.
//     ctx is as for Lock: errors.Is for ErrBusy and ctx.Err(), one try
//     when already done, never the scope once it ends.
//   - A filesystem without working locks: ErrLockingUnsupported, naming
//     scope.lock in scopeDir.
//   - An empty scopeDir or dataDir, a scopeDir that is not a directory, a
//     symlink, a directory or another non-regular file at scope.lock or
//     scope.owner.json: an error naming the path. Nothing is held then.
//
// docs/scope.md says how a server also owns its data dir, and in which
// order; examples/scope is a server built on it.
func AcquireScope(ctx context.Context, scopeDir, dataDir string) (release func(), err error) {
	if scopeDir == "" {
		return nil, errorf("AcquireScope: the scope dir is empty")
	}
	if dataDir == "" {
		return nil, errorf("AcquireScope %s: the data dir is empty", scopeDir)
	}
	if err := ownDir("AcquireScope", scopeDir); err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	if err := ensureDir(scopeDir); err != nil {
		return nil, err
	}
	lockPath := filepath.Join(scopeDir, scopeLockName)
	live := ctx.Err() == nil
	l, err := waitLock(ctx, lockPath, filelock.Exclusive, 0o644, inspectScopeLock)
	if err != nil {
		var be *BusyError
		if errors.As(err, &be) {
			be.Owner = holderDataDir(scopeDir, be.PID)
		}
		return nil, err
	}
	self := Self()
	if err := writeIdentity(l, self); err != nil {
		l.Release()
		return nil, err
	}
	prev, prevState, _ := readScopeOwner(scopeDir)
	data, err := protocolLine(ScopeOwner{DataDir: dataDir, PID: self.PID, Process: self})
	if err == nil {
		err = public(durable.Write(scopeDir, scopeOwnerName, data))
	}
	if errors.Is(err, ErrNotDurable) {
		// The sidecar is in place; it is a hint that names this holder,
		// and a power loss ends the holder with it: not worth refusing.
		logger().Info("runnerstate: the scope owner record is in place but its directory could not be synced", "path", filepath.Join(scopeDir, scopeOwnerName), "err", err)
		err = nil
	}
	if err != nil {
		l.WriteContent(nil)
		l.Release()
		return nil, err
	}
	switch ownerPath := filepath.Join(scopeDir, scopeOwnerName); prevState {
	case fileOK:
		if !sameProcess(prev.Process, self) {
			logger().Info("runnerstate: replaced the scope owner record a previous holder left",
				"path", ownerPath, "pid", prev.PID, "data_dir", prev.DataDir)
		}
	case fileCorrupt:
		logger().Info("runnerstate: replaced an unreadable scope owner record", "path", ownerPath)
	}
	h := &scopeHold{dir: scopeDir, lock: l, self: self}
	if err := keepIfLive(ctx, live, lockPath, h.release); err != nil {
		return nil, err
	}
	return h.release, nil
}

// scopeHold is this process's hold on a scope, from AcquireScope.
type scopeHold struct {
	dir  string
	lock *filelock.File
	self Identity
	once sync.Once
}

// release removes the sidecar while the lock is still held, then clears the
// lock file's identity and frees the lock. When the lock file was replaced
// under it, the sidecar there may be another holder's, so it is left alone.
func (h *scopeHold) release() {
	h.once.Do(func() {
		err := filelock.LetGo(h.lock, func() error {
			if cur, state, _ := readScopeOwner(h.dir); state == fileOK && sameProcess(cur.Process, h.self) {
				return public(durable.Remove(h.dir, scopeOwnerName))
			}
			return nil
		})
		if err != nil {
			logger().Info("runnerstate: could not remove the scope owner record", "path", filepath.Join(h.dir, scopeOwnerName), "err", err)
		}
	})
}

// ReadScopeOwner returns the ScopeOwner recorded in scopeDir/scope.owner.json,
// and false when the file is absent, cannot be read (a symlink, a directory,
// larger than 1 MiB), is not a JSON object or names no data_dir. An
// unreadable or unparsable file is logged once. It locks nothing, creates
// nothing and writes nothing.
//
// The answer is a hint (see ScopeOwner): it does not say whether the owner
// still runs. A refusal from AcquireScope already carries the owner's data
// dir in BusyError.Owner.
func ReadScopeOwner(scopeDir string) (ScopeOwner, bool) {
	owner, state, err := readScopeOwner(scopeDir)
	if state == fileCorrupt {
		path := filepath.Join(scopeDir, scopeOwnerName)
		infoOnce("scope-owner:"+path, "runnerstate: the scope owner record cannot be read and is ignored", "path", path, "err", err)
	}
	return owner, state == fileOK
}

func readScopeOwner(scopeDir string) (ScopeOwner, fileState, error) {
	return readState(filepath.Join(scopeDir, scopeOwnerName), parseScopeOwner)
}

// parseScopeOwner parses scope.owner.json: a JSON object naming a data dir.
func parseScopeOwner(data []byte) (ScopeOwner, error) {
	var owner ScopeOwner
	if err := durable.DecodeObject(data, &owner); err != nil {
		return ScopeOwner{}, err
	}
	if owner.DataDir == "" {
		return ScopeOwner{}, errors.New("names no data_dir")
	}
	if owner.PID != 0 && !liveness.ValidPID(owner.PID) {
		return ScopeOwner{}, errors.New("names no valid pid")
	}
	return owner, nil
}

// holderDataDir is the data dir a refused AcquireScope names: the sidecar's,
// unless it names another pid than the holder's (holder, when known: 0 when
// not) or a process that is provably gone. That happens for
// an instant when a holder was killed and its successor holds the lock but
// has not yet replaced the sidecar; naming the dead holder's data dir then
// would be wrong. Anything that cannot be proven gone is trusted as a name.
func holderDataDir(scopeDir string, holder int) string {
	owner, ok := ReadScopeOwner(scopeDir)
	if !ok || holder > 0 && owner.PID != 0 && owner.PID != holder {
		return "" // not the holder's: left by a previous one, or forged
	}
	switch v, _ := liveness.Check(liveness.Identity(owner.Process)); v {
	case liveness.Dead, liveness.Stale:
		return ""
	}
	return owner.DataDir
}

// inspectScope is inspectLock for the scope lock in scopeDir. Where the lock
// file carries no identity (Windows, whose locked files cannot be read), the
// holder is named from the sidecar instead, and only when its identity is
// verified alive.
func inspectScope(scopeDir string) lockState {
	st := inspectLock(filepath.Join(scopeDir, scopeLockName))
	if st.err != nil || st.occupancy() != occUnverified || !st.silent || locktable.ListsHolders() {
		return st
	}
	owner, state, _ := readScopeOwner(scopeDir)
	if state != fileOK || owner.PID != owner.Process.PID {
		return st
	}
	if v, _ := liveness.Check(liveness.Identity(owner.Process)); v == liveness.Alive || v == liveness.Self {
		st.pid, st.verified, st.holder, st.named, st.verdict = owner.PID, true, owner.Process, true, v
	}
	return st
}
