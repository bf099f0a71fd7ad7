// Package hold is this process's hold on a directory: a value that owns the
// pair of kernel locks that make it (a lock file, and a tree lock whose
// descriptors it lends to child processes), the descriptors it lent, the
// order in which it lets them go, and the signal that one of its lock files
// was lost under it. An Index finds the hold of a directory by the
// directory's identity or, once the directory is gone, by its path.
//
// The caller knows the protocol: it opens and locks the files, and says
// through Files what a hold writes into them and what it clears on release.
package hold

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// ErrReleased is Lend's answer once the hold is released.
var ErrReleased = errors.New("the hold is released")

// Files is what the caller's protocol does with a hold's files.
type Files interface {
	// Stamp writes h's identity into l, one of h's locks, which h holds.
	Stamp(h *Hold, l *filelock.File) error
	// Stamped reports whether data, read from l, is h's identity as Stamp
	// writes it.
	Stamped(h *Hold, l *filelock.File, data []byte) bool
	// Tidy removes what names h in its directory, before h's locks are let
	// go. lockHere is false when h's lock file is no longer at its path
	// (deleted, renamed or replaced under the hold).
	Tidy(h *Hold, lockHere bool)
}

// Hold is this process's hold on a directory, through two kernel locks it
// owns: the lock and the tree lock (nil when the caller holds the lock
// alone). Its methods are safe for concurrent use.
type Hold struct {
	dir, abs   string
	key        durable.Key
	lock, tree *filelock.File
	self       liveness.Identity
	acquiredAt time.Time
	files      Files
	index      *Index // the index h is in, if any
	once       sync.Once

	mu        sync.Mutex
	lent      []*os.File // descriptors of the tree lock handed to children by Lend
	released  bool
	ending    bool   // Release has begun
	leaving   string // why the holder is going, once it is
	published bool   // the holder has published its ready record
	program   string // what the holder said it runs, when it was admitted
	version   string
}

// Describe records what the holder said it runs: its program and version.
func (h *Hold) Describe(program, version string) {
	h.mu.Lock()
	h.program, h.version = program, version
	h.mu.Unlock()
}

// Description is what Describe recorded.
func (h *Hold) Description() (program, version string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.program, h.version
}

// Leaving is why the holder is going ("" until it is), as SetLeaving set it.
func (h *Hold) Leaving() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leaving
}

// SetLeaving records why the holder is going; "" says it is not (a mark
// undone before the holder learnt of it).
func (h *Hold) SetLeaving(why string) {
	h.mu.Lock()
	h.leaving = why
	h.mu.Unlock()
}

// Published reports whether the holder has published its ready record.
func (h *Hold) Published() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.published
}

// SetPublished records that the holder has published its ready record.
func (h *Hold) SetPublished() {
	h.mu.Lock()
	h.published = true
	h.mu.Unlock()
}

// Ending reports whether Release has begun: from then on nothing may be
// written in the hold's name.
func (h *Hold) Ending() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ending
}

// New is a hold of dir by self through lock and tree, which the caller has
// just taken; files is what the hold does with them. Errors: a
// *fs.PathError when dir cannot be stat'd.
func New(dir string, lock, tree *filelock.File, self liveness.Identity, files Files) (*Hold, error) {
	key, err := durable.KeyOf(dir)
	if err != nil {
		return nil, err
	}
	abs, _ := filepath.Abs(dir)
	return &Hold{dir: dir, abs: abs, key: key, lock: lock, tree: tree, self: self, acquiredAt: time.Now(), files: files}, nil
}

// Dir is the directory as the caller named it to New.
func (h *Hold) Dir() string { return h.dir }

// Abs is the directory made absolute when the hold was taken.
func (h *Hold) Abs() string { return h.abs }

// Self is the identity of the holding process, as given to New.
func (h *Hold) Self() liveness.Identity { return h.self }

// AcquiredAt is when the hold was made.
func (h *Hold) AcquiredAt() time.Time { return h.acquiredAt }

// LockFD is the descriptor through which the hold holds its lock.
func (h *Hold) LockFD() int { return int(h.lock.Fd()) }

// Locks lists the hold's kernel locks: the lock, then the tree lock when
// there is one.
func (h *Hold) Locks() []*filelock.File {
	if h.tree == nil {
		return []*filelock.File{h.lock}
	}
	return []*filelock.File{h.lock, h.tree}
}

// Lend returns a new descriptor of the tree lock for a child process to
// inherit. It belongs to the hold: Release closes it. Errors: ErrReleased
// once the hold is released; the error of the descriptor's duplication.
func (h *Hold) Lend() (*os.File, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return nil, ErrReleased
	}
	f, err := h.tree.Dup()
	if err != nil {
		return nil, err
	}
	h.lent = append(h.lent, f)
	return f, nil
}

// Release gives the directory up, once however often it is called: it
// leaves its index, lets Files tidy the directory, closes what Lend handed
// out, clears and frees the tree lock, and last clears and frees the lock.
// A lock file that is no longer at its path is not cleared (what is there
// now is not this hold's); the tree lock is cleared through the hold's own
// descriptor, wherever its file is now.
func (h *Hold) Release() {
	h.once.Do(func() {
		h.mu.Lock()
		h.ending = true
		h.mu.Unlock()
		if h.index != nil {
			h.index.remove(h)
		}
		lockHere, _ := h.lock.AtPath()
		h.files.Tidy(h, lockHere)
		h.mu.Lock()
		h.released = true
		for _, f := range h.lent {
			f.Close()
		}
		h.lent = nil
		h.mu.Unlock()
		if h.tree != nil {
			h.tree.WriteContent(nil)
			h.tree.Release()
		}
		if lockHere {
			h.lock.WriteContent(nil)
		}
		h.lock.Release()
	})
}

// Lost says whether the hold lost a lock file: one of its pair was deleted,
// renamed or replaced while held, or the directory is gone
// (filelock.Lost). why names which. A released hold has lost nothing.
func (h *Hold) Lost() (bool, string) {
	h.mu.Lock()
	released := h.released
	h.mu.Unlock()
	if released {
		return false, ""
	}
	return filelock.Lost(h.dir, h.Locks()...)
}

// Heal stamps again each lock file still at its path whose content another
// program erased or changed (an O_TRUNC open, ": >"), so that the holder
// stays verifiable; limit bounds what is read of each. A lock that carries
// no content on this platform (Windows) is left alone.
func (h *Hold) Heal(limit int) {
	for _, l := range h.Locks() {
		if ok, _ := l.AtPath(); !ok {
			continue
		}
		data, err := l.ReadContent(limit)
		if err != nil {
			continue
		}
		if h.files.Stamped(h, l, data) {
			continue
		}
		if len(data) == 0 && l.Fd() == 0 {
			continue // Windows: the lock file carries nothing
		}
		h.files.Stamp(h, l)
	}
}
