// Package owner judges whether a directory is one only its user (or root)
// controls: who owns it and each of its ancestors, and who else may write
// them, as the kernel says through fstat of descriptors this package opens
// (ssh's StrictModes, gopls's socket check). Judge is the rule, a pure
// function of what was seen; Look sees it; Trusted is the opt-in for a
// directory shared on purpose.
//
// It never logs and knows no file of a runner directory: the caller words
// the refusal (Failure says what fails and why).
package owner

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Overflow is the uid the kernel shows for an owner unmapped in a user
// namespace (nobody): anyone there may be it, so it is never trusted.
const Overflow = 65534

// Part is one directory of a path, as fstat of a descriptor of it says.
type Part struct {
	Path string
	UID  int
	GID  int
	Mode fs.FileMode // permission bits plus fs.ModeSticky
}

// Failure says which part fails and why.
type Failure struct {
	Part Part
	Why  Why
}

// Why a part fails.
type Why int

const (
	// NotOwned: its owner is neither the caller nor root (nor, for a root
	// caller, the directory's owner).
	NotOwned Why = iota + 1
	// Writable: others may write it (group or others' write bit, without
	// the sticky bit for an ancestor), and reach it.
	Writable
	// Overflowed: its owner is the overflow uid.
	Overflowed
)

// Access is what the caller will do in the directory.
type Access int

const (
	// Write: a call that writes, admits, signals or starts.
	Write Access = iota
	// Read: a call that only reads (Running, Status, a Dial that connects).
	Read
)

// Judge applies the rule to parts, the path from "/" down to the
// directory (the last part; missing says the directory is not there yet,
// and then every part is an ancestor of the one to be made), for a caller
// of effective uid euid:
//   - every part is owned by the caller or root, never the overflow uid; a
//     root caller also trusts the directory's owner, and so does a reader
//     (a service account's directory, read by its clients);
//   - the directory: for a writer owned by the caller or root (a root
//     caller: anyone but the overflow uid); nobody else may write it: no
//     group or others' write bit, or it is unreachable by others (an
//     ancestor owned by a trusted uid grants group and others no search bit,
//     as t.TempDir's 0700 parent does under umask 002);
//   - an ancestor: nobody else may write it unless it is sticky (as /tmp
//     is), or it is unreachable by others as above.
//
// trusted reports a path opted in (Trusted): such a part passes whatever
// its owner and mode. The first failing part is returned; nil when none.
func Judge(parts []Part, missing bool, euid int, access Access, trusted func(string) bool) *Failure {
	if len(parts) == 0 {
		return nil
	}
	leafOwner := -1
	if !missing {
		leafOwner = parts[len(parts)-1].UID
	}
	ok := func(uid int) bool {
		switch {
		case uid == Overflow:
			return false
		case uid == euid, uid == 0:
			return true
		}
		return uid == leafOwner && (euid == 0 || access == Read)
	}
	hidden := false // an ancestor already denies others the search of what is below it
	for i, p := range parts {
		leaf := !missing && i == len(parts)-1
		if trusted != nil && trusted(p.Path) {
			hidden = hidden || p.Mode&0o011 == 0
			continue
		}
		switch {
		case p.UID == Overflow:
			return &Failure{Part: p, Why: Overflowed}
		case leaf && access == Write && euid != 0 && p.UID != euid && p.UID != 0:
			return &Failure{Part: p, Why: NotOwned}
		case !ok(p.UID):
			return &Failure{Part: p, Why: NotOwned}
		}
		writable := p.Mode&0o022 != 0
		if !leaf && p.Mode&fs.ModeSticky != 0 {
			writable = false
		}
		if writable && !hidden {
			return &Failure{Part: p, Why: Writable}
		}
		hidden = hidden || p.Mode&0o011 == 0
	}
	return nil
}

// TrustEnv names the environment variable that lists directories used
// whatever their owner and mode (filepath.SplitList's separator; read at
// first use).
const TrustEnv = "RUNNERSTATE_TRUST_DIRS"

// The opted-in directories: the environment's, read once when first
// needed, plus those Trust added. Kept cleaned and absolute, as given and
// with their symlinks resolved.
var trust = struct {
	sync.Mutex
	loaded bool
	dirs   []string
}{}

func loadTrust() {
	if trust.loaded {
		return
	}
	trust.loaded = true
	for _, d := range filepath.SplitList(os.Getenv(TrustEnv)) {
		if filepath.IsAbs(d) {
			trust.dirs = append(trust.dirs, forms(d)...)
		}
	}
}

// forms is dir cleaned, and with its symlinks resolved when that differs.
func forms(dir string) []string {
	out := []string{filepath.Clean(dir)}
	if r, err := filepath.EvalSymlinks(dir); err == nil && r != out[0] {
		out = append(out, r)
	}
	return out
}

// Trust adds dirs to the opted-in ones and returns a func that restores
// the list as it was. A relative dir is taken from the working directory.
func Trust(dirs ...string) (restore func()) {
	trust.Lock()
	defer trust.Unlock()
	loadTrust()
	old := slices.Clone(trust.dirs)
	for _, d := range dirs {
		if abs, err := filepath.Abs(d); err == nil && d != "" {
			trust.dirs = append(trust.dirs, forms(abs)...)
		}
	}
	return func() {
		trust.Lock()
		trust.dirs = old
		trust.Unlock()
	}
}

// Trusted reports whether path (absolute, cleaned) is opted in.
func Trusted(path string) bool {
	trust.Lock()
	defer trust.Unlock()
	loadTrust()
	return slices.Contains(trust.dirs, path)
}

// anyTrusted reports whether any directory is opted in, so that Look's
// callers skip the lookups when none is.
func anyTrusted() bool {
	trust.Lock()
	defer trust.Unlock()
	loadTrust()
	return len(trust.dirs) > 0
}

// Check looks at dir (Look) and judges it (Judge) for this process's
// effective uid: a nil *Failure when it passes, the failing part when one
// fails, or the error of a look that failed. owner is the dir's owner, or
// -1 when it is not there, or is opted in whole (Trusted): then it passes
// unseen, and the owners of its files are not asked either.
func Check(dir string, access Access) (owner int, f *Failure, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return -1, nil, err
	}
	var trusted func(string) bool
	if anyTrusted() {
		if Trusted(abs) {
			return -1, nil, nil
		}
		trusted = Trusted
	}
	parts, missing, err := Look(abs)
	if err != nil || len(parts) == 0 {
		return -1, nil, err
	}
	if missing {
		return -1, Judge(parts, missing, os.Geteuid(), access, trusted), nil
	}
	leaf := parts[len(parts)-1]
	if trusted != nil && Trusted(leaf.Path) {
		return -1, nil, nil
	}
	return leaf.UID, Judge(parts, missing, os.Geteuid(), access, trusted), nil
}

// Strangers are the files among files (Files) owned by neither dirOwner nor
// root: in a directory only its owner can write, nobody else can have made
// them unless it was once shared, and they prove nothing.
func Strangers(files []Part, dirOwner int) []Part {
	var out []Part
	for _, f := range files {
		if f.UID != dirOwner && f.UID != 0 {
			out = append(out, f)
		}
	}
	return out
}

// Evidence reports whether a file at path whose owner is uid (from the
// fstat of the descriptor it was read through; -1 where the system has no
// uids) is evidence of anything: owned by root or by its directory's
// owner, or in a directory opted in. Nobody else can have made it in a
// directory only its owner can write, unless it was once shared.
func Evidence(path string, uid int) bool {
	if uid <= 0 {
		return true
	}
	dir := filepath.Dir(path)
	if d := ownerOf(dir); d < 0 || d == uid {
		return true
	}
	abs, err := filepath.Abs(dir)
	return err != nil || Trusted(abs)
}

// OwnerOf is the uid that owns path (its symlinks followed), -1 when it
// cannot be told.
func OwnerOf(path string) int { return ownerOf(path) }
