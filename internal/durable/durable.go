// Package durable reads and writes the small files a runner directory holds
// without ever following a symlink, blocking on a FIFO, reading a runaway
// file whole, or tearing a byte, and decodes what it reads (ReadState,
// DecodeObject, Last).
//
// A file is replaced atomically (Write): the data goes to a temporary file in
// the same directory, created O_EXCL|O_NOFOLLOW (a planted symlink is never
// followed), written, fsynced, closed, renamed over the target, and the
// directory fsynced, so that a reader or a crash sees the old content or the
// new, never a mix (the shape of google/renameio). On any failure the
// temporary file is removed; one left by a killed writer is removed by the
// next writer of that name (removeLeftovers).
//
// A change (a replace, a rename, a removal) whose directory sync fails is
// already in place and every reader sees it; it is only not known to survive
// a power loss. That is a *NotDurableError (errors.Is ErrNotDurable), never
// the error of a change that was not made: the caller must not act as if the
// call had done nothing.
//
// Errors are *fs.PathError naming the path, with one of this package's
// sentinels (ErrSymlink, ErrIsDir, ErrNotRegular, ErrTooLarge), a
// *NotDurableError or the system's error as Err. Nothing here logs, and
// nothing knows which files the caller keeps. Windows' sharing rules, and
// how a replace waits them out, are in durable_windows.go.
package durable

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
)

// Why a path is refused. Each comes inside an *fs.PathError naming the path,
// and says what to do.
var (
	ErrSymlink    = errors.New("is a symlink, which is never followed here; remove it")
	ErrIsDir      = errors.New("is a directory where a file belongs; move it away")
	ErrNotRegular = errors.New("is not a regular file; move it away")
	// ErrDanglingSymlink refuses a directory path that is a symlink to
	// nothing: the directory cannot be made there.
	ErrDanglingSymlink = errors.New("is a symlink to a missing directory; make its target, or remove it")
	ErrNotDir          = errors.New("is not a directory; move it away, or name another path")
	// ErrTooLarge is ReadFile's answer for a file larger than asked for;
	// the first bytes come with it.
	ErrTooLarge = errors.New("file is larger than a record can be")
)

// Unusable reports whether err refuses a path that no retry can use until
// it is moved away: a symlink, a directory or another non-regular file
// where a regular file belongs.
func Unusable(err error) bool {
	return errors.Is(err, ErrSymlink) || errors.Is(err, ErrIsDir) || errors.Is(err, ErrNotRegular)
}

// ErrNotDurable says a change was made but its directory could not be
// synced: it is in place and every reader sees it, but it is not known to
// survive a power loss (after one, either the old state or the new may be
// found, never a mix). The next change that syncs the directory makes it
// durable. It comes as a *NotDurableError.
var ErrNotDurable = errors.New("done, and every reader sees it, but not known to survive a power loss")

// NotDurableError is ErrNotDurable with the failed sync of the directory.
type NotDurableError struct {
	Dir string // the directory that could not be synced
	Err error  // the sync's error, naming Dir
}

func (e *NotDurableError) Error() string {
	return ErrNotDurable.Error() + " (" + e.Err.Error() + "); the next write that succeeds in " + e.Dir + " makes it durable"
}

func (e *NotDurableError) Is(target error) bool { return target == ErrNotDurable }
func (e *NotDurableError) Unwrap() error        { return e.Err }

// SyncAfter syncs dir after op changed path in it (a write, a rename, a
// removal): its error is an *fs.PathError naming path with a
// *NotDurableError, since the change is in place.
func SyncAfter(op, path, dir string) error {
	if err := SyncDir(dir); err != nil {
		return &fs.PathError{Op: op, Path: path, Err: &NotDurableError{Dir: dir, Err: err}}
	}
	return nil
}

// refused is the error for a path that is refused for why.
func refused(path string, why error) error {
	return &fs.PathError{Op: "refusing", Path: path, Err: why}
}

// CheckMode refuses a file mode that is not a regular file's: a symlink, a
// directory or anything else, with the error naming path. It is the one
// place that decides what may stand where a state or lock file belongs.
func CheckMode(path string, mode fs.FileMode) error {
	switch {
	case mode&fs.ModeSymlink != 0:
		return refused(path, ErrSymlink)
	case mode.IsDir():
		return refused(path, ErrIsDir)
	case !mode.IsRegular():
		return refused(path, ErrNotRegular)
	}
	return nil
}

// CheckEntries refuses, with CheckMode, the first of names in dir that
// exists and is not a regular file; names that do not exist (or cannot be
// looked up) pass.
func CheckEntries(dir string, names ...string) error {
	for _, name := range names {
		p := filepath.Join(dir, name)
		if fi, err := os.Lstat(p); err == nil {
			if err := CheckMode(p, fi.Mode()); err != nil {
				return err
			}
		}
	}
	return nil
}

// Unwrap returns the system's error inside an *fs.PathError or
// *os.LinkError, so that the caller can name the path its own way.
func Unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// NotDir is the refusal of path when it, or a directory on the way to it,
// is not a directory (the system said ENOTDIR): it names the first of them
// that exists and is not a directory, so that a file standing where a
// parent directory belongs is named, not the path below it. Its error is an
// *fs.PathError naming path that satisfies errors.Is(err, ErrNotDir).
func NotDir(path string) error {
	for p := filepath.Clean(path); ; {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			if p == filepath.Clean(path) {
				return refused(path, ErrNotDir)
			}
			return refused(path, notDirAbove(p))
		}
		parent := filepath.Dir(p)
		if parent == p {
			return refused(path, ErrNotDir)
		}
		p = parent
	}
}

// IsNotDir reports whether err says a path, or a directory on the way to it,
// is not a directory (ENOTDIR). Windows answers a missing directory on the
// way with an error Go also calls ENOTDIR, which is fs.ErrNotExist too:
// that one is not.
func IsNotDir(err error) bool {
	return errors.Is(err, syscall.ENOTDIR) && !errors.Is(err, fs.ErrNotExist)
}

// notDirAbove is ErrNotDir for a parent of the refused path.
type notDirAbove string

func (e notDirAbove) Error() string {
	return "its parent " + string(e) + " is not a directory; move " + string(e) + " away, or name another path"
}

func (e notDirAbove) Is(target error) bool { return target == ErrNotDir }

// EnsureDir creates dir (perm, parents too) when it does not exist, and
// refuses a dir that is not a directory, or one below a file (NotDir).
func EnsureDir(dir string, perm fs.FileMode) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return refused(dir, ErrNotDir)
		}
		return nil
	}
	if IsNotDir(err) {
		return NotDir(dir)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return &fs.PathError{Op: "stat", Path: dir, Err: Unwrap(err)}
	}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return refused(dir, ErrDanglingSymlink) // mkdir would only say "file exists"
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: Unwrap(err)}
	}
	return nil
}

// OpenToAll reports whether any user may replace the files in the
// directory fi describes: it is world-writable without the sticky bit.
// Windows has no mode bits to tell (Go reports every directory as 0777, and
// who may write is an ACL's business), so there it is false.
func OpenToAll(fi fs.FileInfo) bool {
	return modeBits && fi.Mode().Perm()&0o002 != 0 && fi.Mode()&fs.ModeSticky == 0
}

// Remove removes dir/name if it is there, and syncs dir so that the removal
// survives a power loss. A missing file is not an error.
func Remove(dir, name string) error {
	path := filepath.Join(dir, name)
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return &fs.PathError{Op: "remove", Path: path, Err: Unwrap(err)}
	}
	return SyncAfter("remove", path, dir)
}

// RemoveIf removes dir/name when mine says its content is the caller's, and
// never removes another's content, even one written there between the look
// and the removal: what is at the path is first renamed to a temporary name
// of this process's, checked there, and removed only when it is mine;
// anything else goes back to its name unless a newer file took that name
// meanwhile (then the older one is dropped). It is for a caller that holds
// no lock that serialises the writers of dir/name. A missing file is not an
// error. removed says whether it removed the caller's file.
func RemoveIf(dir, name string, limit int, mine func(data []byte) bool) (removed bool, err error) {
	path := filepath.Join(dir, name)
	if data, err := ReadFile(path, limit); err != nil || !mine(data) {
		return false, nil // cheap look first: nothing of the caller's
	}
	tmp := filepath.Join(dir, TempPrefix(name)+WriterTag()+"-"+tempRandom())
	if err := os.Rename(path, tmp); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, &fs.PathError{Op: "remove", Path: path, Err: Unwrap(err)}
	}
	if data, err := ReadFile(tmp, limit); err == nil && mine(data) {
		os.Remove(tmp)
		return true, SyncAfter("remove", path, dir)
	}
	if err := RenameNoReplace(tmp, path); err != nil {
		os.Remove(tmp) // a newer file has the name: the one moved aside is older
	}
	return false, nil
}

// SetAside renames dir/name to a name of its own that begins with
// name+suffix, followed by "-" and the time in UTC
// (runner.json.corrupt-20260102T030405.123456789Z), so that an unreadable
// file is kept for a person to look at while its name is free again, and
// no earlier copy is replaced. Of the copies, the keep newest stay: older
// ones (by the time in the name; a bare name+suffix, without a time,
// is the oldest) are removed. It returns the new path.
func SetAside(dir, name, suffix string, keep int) (string, error) {
	path := filepath.Join(dir, name)
	base := path + suffix + "-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	aside := base
	err := RenameNoReplace(path, aside)
	for i := 0; i < 3 && errors.Is(err, fs.ErrExist); i++ {
		aside = base + "-" + tempRandom() // the same nanosecond: never replace a copy
		err = RenameNoReplace(path, aside)
	}
	if err != nil {
		return "", &fs.PathError{Op: "rename", Path: path, Err: Unwrap(err)}
	}
	pruneAside(dir, name+suffix, keep)
	return aside, SyncAfter("rename", path, dir)
}

// pruneAside removes the oldest set-aside copies whose names begin with
// prefix, beyond the keep newest. Directories are never removed.
func pruneAside(dir, prefix string, keep int) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return
	}
	var copies []string
	for _, n := range names {
		if n == prefix || strings.HasPrefix(n, prefix+"-") {
			copies = append(copies, n)
		}
	}
	if len(copies) <= keep {
		return
	}
	slices.Sort(copies) // the time in the name sorts them; the bare prefix first
	for _, n := range copies[:len(copies)-keep] {
		p := filepath.Join(dir, n)
		if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
			os.Remove(p)
		}
	}
}

// Write replaces dir/name with data atomically and durably (see the package
// doc): after it returns nil, a crash or a power loss leaves the new
// content. A symlink, a directory or another non-regular file at dir/name is
// refused. Errors name dir/name, or the temporary file for a failure of its
// own (its write, fsync or close); the temporary file is removed on every
// failure. A failure to sync the directory after the rename is a
// *NotDurableError: the new content is in place and read by everyone, but
// not known to survive a power loss.
func Write(dir, name string, data []byte) error {
	return replace(dir, name, data, synced)
}

// WriteVolatile is Write without the fsyncs: atomic (readers see the old
// content or the new) but not durable. It is for files that describe live
// processes, which a power loss ends anyway.
func WriteVolatile(dir, name string, data []byte) error {
	return replace(dir, name, data, unsynced)
}

// WriteToAll is Write for a file every local user must be able to read
// (a runner's record, its restart request, its gate, Start's attempt): it
// is made 0644 whatever the umask, on the temporary file's descriptor
// before it is renamed into place.
func WriteToAll(dir, name string, data []byte) error {
	return replace(dir, name, data, synced|toAll)
}

// WriteVolatileToAll is WriteVolatile for a file every local user must be
// able to read, made 0644 whatever the umask (see WriteToAll).
func WriteVolatileToAll(dir, name string, data []byte) error {
	return replace(dir, name, data, toAll)
}

// durability says whether a write fsyncs the file and its directory, and
// whether its mode is set whatever the umask.
type durability uint8

const (
	unsynced durability = 0
	synced   durability = 1 << iota
	toAll
)

func replace(dir, name string, data []byte, d durability) error {
	target := filepath.Join(dir, name)
	if err := checkTarget(target); err != nil {
		return err
	}
	removeLeftovers(dir, name)
	f, tmp, err := createTemp(dir, name, target)
	if err != nil {
		return err
	}
	if err := fill(f, tmp, data, d); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := replaceFile(tmp, target); err != nil {
		os.Remove(tmp)
		return &fs.PathError{Op: "rename", Path: target, Err: Unwrap(err)}
	}
	if d&synced == 0 {
		return nil
	}
	return SyncAfter("write", target, dir)
}

// checkTarget refuses to replace anything but a regular file (or nothing).
func checkTarget(target string) error {
	fi, err := os.Lstat(target)
	if err == nil {
		return CheckMode(target, fi.Mode())
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return &fs.PathError{Op: "stat", Path: target, Err: Unwrap(err)}
}

// createTemp creates the temporary file of name in dir, exclusively and
// without following a symlink. A failure is reported against target, the
// file the caller asked for, except a symlink planted at the temporary path.
func createTemp(dir, name, target string) (*os.File, string, error) {
	prefix := TempPrefix(name) + WriterTag() + "-"
	var tmp string
	for range 4 {
		tmp = filepath.Join(dir, prefix+tempRandom())
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, 0o644)
		if err == nil {
			GiveToDirOwner(int(f.Fd()), dir)
			return f, tmp, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, "", &fs.PathError{Op: "write", Path: target, Err: Unwrap(err)}
		}
		if fi, lerr := os.Lstat(tmp); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, "", refused(tmp, ErrSymlink)
		}
	}
	return nil, "", &fs.PathError{Op: "create", Path: tmp, Err: fs.ErrExist}
}

// fill writes data to the temporary file f, fsyncs it when d says so, and
// closes it (on failure too).
func fill(f *os.File, tmp string, data []byte, d durability) error {
	if d&toAll != 0 && modeBits {
		if err := f.Chmod(0o644); err != nil {
			f.Close()
			return &fs.PathError{Op: "chmod", Path: tmp, Err: Unwrap(err)}
		}
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return &fs.PathError{Op: "write", Path: tmp, Err: Unwrap(err)}
	}
	if d&synced != 0 {
		if err := f.Sync(); err != nil {
			f.Close()
			return &fs.PathError{Op: "fsync", Path: tmp, Err: Unwrap(err)}
		}
	}
	if err := f.Close(); err != nil {
		return &fs.PathError{Op: "close", Path: tmp, Err: Unwrap(err)}
	}
	return nil
}

// tempInfix marks a temporary file: ".<name>.tmp-<writer>-<random>".
const tempInfix = ".tmp-"

// TempPrefix is how the temporary files of name begin: ".<name>.tmp-". A
// long name is shortened and a hash of it added, so that the temporary name
// still fits where the name itself does (255 bytes on most filesystems).
func TempPrefix(name string) string {
	if len(name) > 160 {
		h := fnv.New64a()
		h.Write([]byte(name))
		name = name[:120] + "~" + strconv.FormatUint(h.Sum64(), 16)
	}
	return "." + name + tempInfix
}

// IsTemp reports whether name is a temporary file's name, which a caller
// must never pick for a file of its own.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempInfix)
}

// LeftoverAge is the age past which any leftover temporary file is removed:
// a younger one may be a concurrent writer's.
const LeftoverAge = time.Minute

// WriterTag names this process in temporary file names: pid, start ticks
// and a hash of boot id and PID namespace, so that a later writer can tell
// whether the writer of a leftover is gone.
var WriterTag = sync.OnceValue(func() string {
	self := liveness.Current()
	h := fnv.New32a()
	h.Write([]byte(self.BootID + "|" + self.PIDNS))
	return strconv.Itoa(self.PID) + "-" + strconv.FormatUint(self.StartTicks, 10) + "-" + strconv.FormatUint(uint64(h.Sum32()), 16)
})

// testTempRandom, when set, names the random part of temporary files
// (SetTempRandom).
var testTempRandom atomic.Pointer[func() string]

// tempRandom returns the random part of a temporary file name.
func tempRandom() string {
	if fn := testTempRandom.Load(); fn != nil {
		return (*fn)()
	}
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SetTempRandom makes fn name the random part of temporary files, and
// returns a func that restores the default. For tests that plant a symlink
// at the exact temporary path.
func SetTempRandom(fn func() string) (restore func()) {
	old := testTempRandom.Swap(&fn)
	return func() { testTempRandom.Store(old) }
}

// removeLeftovers removes temporary files of name left by writers that are
// gone: any older than LeftoverAge, and younger ones whose writer, named in
// the file name, is provably dead on this machine.
func removeLeftovers(dir, name string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return
	}
	prefix := TempPrefix(name)
	for _, n := range names {
		tag, ok := strings.CutPrefix(n, prefix)
		if !ok {
			continue
		}
		p := filepath.Join(dir, n)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if time.Since(fi.ModTime()) > LeftoverAge || WriterGone(tag) {
			os.Remove(p)
		}
	}
}

// WriterGone parses "<pid>-<ticks>-<nshash>-<random>", the tail of a
// temporary file name, and reports whether that writer is provably gone:
// same boot and PID namespace as this process, and its pid is dead or now
// names a later process. Anything it cannot parse or prove is not gone.
func WriterGone(tag string) bool {
	parts := strings.Split(tag, "-")
	if len(parts) != 4 {
		return false
	}
	selfParts := strings.Split(WriterTag(), "-")
	if parts[2] != selfParts[2] {
		return false // another boot or namespace: only age tells
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 {
		return false
	}
	ticks, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || ticks == 0 {
		return false
	}
	me := liveness.Current()
	id := liveness.Identity{PID: pid, StartTicks: ticks, BootID: me.BootID, PIDNS: me.PIDNS, Machine: me.Machine}
	v, _ := liveness.Check(id)
	return v == liveness.Dead || v == liveness.Stale
}

// renameLink renames without replacing by linking the new name (which fails
// when it exists) and removing the old one. Where hard links are not
// supported it falls back to a checked rename, which is safe among writers
// that serialise on a lock of their own.
func renameLink(oldPath, newPath string) error {
	err := os.Link(oldPath, newPath)
	if err == nil {
		return os.Remove(oldPath)
	}
	if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, serr := os.Lstat(newPath); serr == nil {
		return &os.LinkError{Op: "rename", Old: oldPath, New: newPath, Err: fs.ErrExist}
	}
	return os.Rename(oldPath, newPath)
}
