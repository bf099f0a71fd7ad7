package runnerstate

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
)

// Identity names one process precisely enough that a recycled pid, a reboot,
// another PID namespace or another machine can never pass for it. It is what a
// runner writes into runner.lock and runner.json, and what a waiting starter
// shows in Status.
//
// Trust: an Identity read from a file is a hint. It becomes evidence only when
// the process it names is looked up now and every field that identifies it
// matches exactly (see Status's Verified). A bare PID is never evidence.
type Identity struct {
	Instance string `json:"instance"` // random per process: 32 hex digits
	PID      int    `json:"pid"`
	// StartTicks is the exact start identity of the process. On Linux it is
	// field 22 of /proc/<pid>/stat (clock ticks after boot); on macOS
	// kern.proc.pid's p_starttime in microseconds since the Unix epoch; on
	// Windows the creation time in 100 ns units. It is compared exactly.
	StartTicks uint64    `json:"start_ticks,omitempty"`
	StartTime  time.Time `json:"start_time,omitzero"` // portable; informational on Linux
	BootID     string    `json:"boot_id,omitempty"`   // /proc/sys/kernel/random/boot_id
	PIDNS      string    `json:"pid_ns,omitempty"`    // "dev:ino" of /proc/self/ns/pid
	// Machine is the machine id (/etc/machine-id on Linux) hashed with an
	// application key, so the raw id never leaves the machine.
	Machine  string `json:"machine,omitempty"`
	Hostname string `json:"hostname,omitempty"`
}

// String is a short human form: "pid 1234 (instance 0123abcd)".
func (id Identity) String() string {
	inst := id.Instance
	if len(inst) > 8 {
		inst = inst[:8]
	}
	if inst == "" {
		return "pid " + strconv.Itoa(id.PID)
	}
	return "pid " + strconv.Itoa(id.PID) + " (instance " + inst + ")"
}

// Self returns this process's identity. It is computed once.
func Self() Identity { return Identity(liveness.Current()) }

// sameProcess reports whether two identities name the same process
// incarnation: same instance when both carry one, same pid and start ticks.
func sameProcess(a, b Identity) bool {
	if a.PID <= 0 || a.PID != b.PID || a.StartTicks != b.StartTicks {
		return false
	}
	if a.Instance != "" && b.Instance != "" && a.Instance != b.Instance {
		return false
	}
	return a.BootID == b.BootID && a.PIDNS == b.PIDNS
}

// Record is what a runner publishes in runner.json with Publish. PID and
// Process are filled in by Publish from the kernel's view of the calling
// process, so they cannot be forged by the caller; StartedAt defaults to the
// moment the lock was taken. Everything else is the runner's own description.
//
// Trust: a Record read back is reported by Running and Status only when it
// names the process the kernel says holds the lock and that identity is
// confirmed alive. A record from a dead runner is stale and cleared by the
// next holder.
type Record struct {
	PID         int             `json:"pid"`
	Process     Identity        `json:"process,omitzero"`
	StartedAt   time.Time       `json:"started_at,omitzero"`
	MaxParallel int             `json:"max_parallel,omitempty"`
	Specs       []string        `json:"specs,omitempty"`
	Meta        json.RawMessage `json:"meta,omitempty"` // the caller's own payload
}

// maxRecordSize bounds what is read of runner.json, restart.json and a lock
// file: a runaway or hostile 50 MB file is refused, not read whole.
const maxRecordSize = 1 << 20

// maxStateSize bounds what LoadLines and AppendLine read.
const maxStateSize = 64 << 20

// Publish writes rec as this runner's runner.json in dir, atomically. It fills
// rec.PID and rec.Process with this process's identity and rec.StartedAt with
// the time the lock was taken when it is zero.
//
// Errors: ErrNotHolder (wrapped, naming dir) unless this process holds dir's
// runner lock through Acquire or Takeover and the lock file is still the one it
// locked; a symlink or directory at runner.json is refused naming the path;
// otherwise the system's error naming the path. Touches runner.json and a
// temporary file beside it.
func Publish(dir string, rec Record) error {
	if err := checkDir("Publish", dir); err != nil {
		return err
	}
	h := heldBy(dir)
	if h == nil {
		return fmt.Errorf("%w: %s (take it with Acquire or Takeover first)", ErrNotHolder, filepath.Join(dir, LockName))
	}
	if ok, err := h.lock.atPath(kindExclusive); err != nil || !ok {
		return fmt.Errorf("%w: %s was removed or replaced while held", ErrNotHolder, h.lock.path)
	}
	self := Self()
	rec.PID = self.PID
	rec.Process = self
	if rec.StartedAt.IsZero() {
		rec.StartedAt = h.acquiredAt
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return errorf("publish %s: %w", filepath.Join(dir, RecordName), err)
	}
	data = append(data, '\n')
	if len(data) > maxRecordSize {
		return pathError("publish", filepath.Join(dir, RecordName), fmt.Errorf("the record is %d bytes, over the %d a reader accepts; keep Meta small", len(data), maxRecordSize))
	}
	return withStateLock(dir, func() error {
		return writeAtomic(dir, RecordName, data)
	})
}

// readRecordState is what reading runner.json found.
type fileState int

const (
	fileAbsent fileState = iota
	fileOK
	fileCorrupt // unreadable, unparsable, a symlink, a directory, too large
)

// readRecord reads runner.json. A file that cannot be read or parsed is
// reported as fileCorrupt with the reason; it is never modified here.
func readRecord(dir string) (Record, fileState, error) {
	path := filepath.Join(dir, RecordName)
	data, err := readHint(path, maxRecordSize)
	if err != nil {
		if isNotExist(err) {
			return Record{}, fileAbsent, nil
		}
		return Record{}, fileCorrupt, err
	}
	rec, err := parseRecord(data)
	if err != nil {
		return Record{}, fileCorrupt, pathError("parse", path, err)
	}
	return rec, fileOK, nil
}

// parseRecord parses runner.json content. A record must be a JSON object that
// names a positive pid.
func parseRecord(data []byte) (Record, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return Record{}, errors.New("empty file")
	}
	if data[0] != '{' {
		return Record{}, errors.New("not a JSON object")
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return Record{}, err
	}
	if !validPID(rec.PID) {
		return Record{}, fmt.Errorf("names no valid pid (pid %d)", rec.PID)
	}
	if rec.Process.PID != 0 && rec.Process.PID != rec.PID {
		return Record{}, fmt.Errorf("pid %d disagrees with its process identity's pid %d", rec.PID, rec.Process.PID)
	}
	return rec, nil
}

// parseLockContent parses the first line of runner.lock: the holder's identity
// as JSON, or a bare decimal pid from older runners (which carries no start
// identity, so it can never be verified). ok is false for anything else,
// including a pid <= 0.
func parseLockContent(data []byte) (id Identity, ok bool) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return Identity{}, false
	}
	if data[0] == '{' {
		if err := json.Unmarshal(data, &id); err != nil || !validPID(id.PID) {
			return Identity{}, false
		}
		return id, true
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil || !validPID(pid) {
		return Identity{}, false
	}
	return Identity{PID: pid}, true
}

// maxPID is the largest pid a pid_t holds. A larger number read from a file is
// no pid at all: kill(2) would truncate it into another pid (4294967297 is
// pid 1, 4294967295 is -1: every process).
const maxPID = 1<<31 - 1

// validPID reports whether pid can name a process.
func validPID(pid int) bool { return pid > 0 && pid <= maxPID }

// SaveLines replaces the state file dir/name with lines, one per line, each
// ended by "\n", atomically: a reader or a crash sees the old content or the
// new, never a mix. name must be a plain file name and not one of the files
// this package manages. A line may not contain "\n".
//
// Errors name the path: a symlink or a directory at the path is refused, a
// bad name or line is refused; otherwise the system's error. Creates dir
// (0755) when it does not exist; touches dir/name and a temporary file beside
// it, under the directory's state lock.
func SaveLines(dir, name string, lines []string) error {
	if err := checkStateName(dir, name); err != nil {
		return err
	}
	var b bytes.Buffer
	if err := appendLines(&b, dir, name, lines); err != nil {
		return err
	}
	if b.Len() > maxStateSize {
		return pathError("save", filepath.Join(dir, name), errors.New("larger than the 64 MiB LoadLines reads"))
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	return withStateLock(dir, func() error {
		return writeAtomic(dir, name, b.Bytes())
	})
}

// LoadLines reads the state file dir/name as lines without their "\n". It
// returns nil, nil when the file was never saved and an empty, non-nil slice
// for a file saved empty.
//
// Errors name the path: a symlink, a directory or a file over 64 MiB is
// refused; otherwise the system's error. It takes no lock and creates nothing.
func LoadLines(dir, name string) ([]string, error) {
	if err := checkStateName(dir, name); err != nil {
		return nil, err
	}
	data, err := readHint(filepath.Join(dir, name), maxStateSize)
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		if err == errTooLarge {
			return nil, pathError("read", filepath.Join(dir, name), errors.New("larger than 64 MiB"))
		}
		return nil, err
	}
	return splitLines(data), nil
}

// AppendLine adds line to the end of the state file dir/name, creating it
// when absent. Every line already there is kept as it is, comments and lines
// this package does not understand included; a last line without its "\n" is
// completed first. Concurrent appends, from goroutines or processes, are
// serialised by the directory's state lock and lose nothing, and the file is
// replaced atomically, so a crash leaves the old content or the new.
//
// The whole file is read and rewritten under the state lock, so an append
// costs in proportion to the file's size (a few milliseconds for a small file,
// most of it the fsyncs); keep appended files small, or rotate them.
//
// Errors are those of SaveLines.
func AppendLine(dir, name, line string) error {
	if err := checkStateName(dir, name); err != nil {
		return err
	}
	if strings.ContainsRune(line, '\n') {
		return pathError("append", filepath.Join(dir, name), errors.New("line contains a newline"))
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	return withStateLock(dir, func() error {
		path := filepath.Join(dir, name)
		old, err := readHint(path, maxStateSize)
		switch {
		case err == nil:
		case isNotExist(err):
			old = nil
		case err == errTooLarge:
			return pathError("append", path, errors.New("larger than 64 MiB"))
		default:
			return err
		}
		data := make([]byte, 0, len(old)+len(line)+2)
		data = append(data, old...)
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(data, '\n')
		}
		data = append(data, line...)
		data = append(data, '\n')
		if len(data) > maxStateSize {
			return pathError("append", path, errors.New("would grow past the 64 MiB LoadLines reads"))
		}
		return writeAtomic(dir, name, data)
	})
}

// MigrateFile renames the state file dir/oldName to dir/newName, for a
// program that renames a file between versions. It is safe to race: an
// existing newName wins and oldName is removed; a directory at oldName is left
// where it is and the call returns nil; a caller that finds oldName already
// gone (another process migrated it first) returns nil.
//
// Errors name the path: a symlink at either name is refused; otherwise the
// system's error. Runs under the directory's state lock.
func MigrateFile(dir, oldName, newName string) error {
	if err := checkStateName(dir, oldName); err != nil {
		return err
	}
	if err := checkStateName(dir, newName); err != nil {
		return err
	}
	if oldName == newName {
		return nil
	}
	return withStateLock(dir, func() error {
		oldPath, newPath := filepath.Join(dir, oldName), filepath.Join(dir, newName)
		fi, err := os.Lstat(oldPath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return pathError("stat", oldPath, unwrapPathErr(err))
		case fi.IsDir():
			return nil
		case fi.Mode()&fs.ModeSymlink != 0:
			return symlinkError(oldPath)
		}
		nfi, err := os.Lstat(newPath)
		switch {
		case err == nil && nfi.Mode()&fs.ModeSymlink != 0:
			return symlinkError(newPath)
		case err == nil:
			if err := os.Remove(oldPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return pathError("remove", oldPath, unwrapPathErr(err))
			}
			return syncDir(dir)
		case !errors.Is(err, fs.ErrNotExist):
			return pathError("stat", newPath, unwrapPathErr(err))
		}
		if err := renameNoReplace(oldPath, newPath); err != nil {
			if errors.Is(err, fs.ErrExist) {
				// newName appeared under us (a writer that does not take the
				// state lock): it wins.
				os.Remove(oldPath)
				return syncDir(dir)
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return pathError("rename", oldPath, unwrapPathErr(err))
		}
		return syncDir(dir)
	})
}

func unwrapPathErr(err error) error {
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

// checkStateName refuses names that are not plain file names, and the files
// the runner protocol manages itself.
func checkStateName(dir, name string) error {
	if err := checkDir("state file "+name, dir); err != nil {
		return err
	}
	switch {
	case name == "", name == ".", name == "..", strings.ContainsAny(name, `/\`+"\x00"),
		name != filepath.Base(name):
		return pathError("state file", filepath.Join(dir, name), errBadName)
	}
	if reservedName(name) {
		return pathError("state file", filepath.Join(dir, name), errors.New("is managed by runnerstate itself; pick another name"))
	}
	return nil
}

func reservedName(name string) bool {
	switch name {
	case LockName, RecordName, RestartName, gateName, stateLockName, scopeLockName, scopeOwnerName, syncLockName:
		return true
	}
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempInfix)
}

func appendLines(b *bytes.Buffer, dir, name string, lines []string) error {
	for i, l := range lines {
		if strings.ContainsRune(l, '\n') {
			return pathError("save", filepath.Join(dir, name), fmt.Errorf("line %d contains a newline", i+1))
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return nil
}

func splitLines(data []byte) []string {
	lines := []string{}
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			lines = append(lines, string(data))
			break
		}
		lines = append(lines, string(data[:i]))
		data = data[i+1:]
	}
	return lines
}

// Atomic writes.
//
// A state file is written to ".<name>.tmp-<writer>-<random>" in the same
// directory, created O_EXCL|O_NOFOLLOW (a planted symlink is never followed),
// written, fsynced, closed, renamed over the target and the directory fsynced.
// On any failure the temporary file is removed. A temporary file left by a
// writer that was killed is removed by the next writer of that name when it is
// older than a minute or when the writer it names is provably gone.

const tempInfix = ".tmp-"

// tempPrefix is how the temporary files of name begin: ".<name>.tmp-". A long
// name is shortened and a hash of it added, so that the temporary name still
// fits where the name itself does (255 bytes on most filesystems).
func tempPrefix(name string) string {
	if len(name) > 160 {
		h := fnv.New64a()
		h.Write([]byte(name))
		name = name[:120] + "~" + strconv.FormatUint(h.Sum64(), 16)
	}
	return "." + name + tempInfix
}

// tempLeftoverAge is the age past which any leftover temporary file is
// removed: a younger one may be a concurrent writer's.
const tempLeftoverAge = time.Minute

// writerTag names this process in temporary file names: pid, start ticks and a
// hash of boot id and PID namespace, so a later writer can tell whether the
// writer of a leftover is gone.
var writerTag = sync.OnceValue(func() string {
	self := liveness.Current()
	h := fnv.New32a()
	h.Write([]byte(self.BootID + "|" + self.PIDNS))
	return strconv.Itoa(self.PID) + "-" + strconv.FormatUint(self.StartTicks, 10) + "-" + strconv.FormatUint(uint64(h.Sum32()), 16)
})

// tempRandom returns the random part of a temporary file name. Tests replace
// it to plant a symlink at the exact temporary path.
var tempRandom = func() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func writeAtomic(dir, name string, data []byte) error {
	return writeAtomicOpt(dir, name, data, true)
}

// writeAtomicOpt is writeAtomic; durable false skips the fsyncs, for files
// that only describe live processes (the gate), where atomicity matters and
// surviving a power loss does not.
func writeAtomicOpt(dir, name string, data []byte, durable bool) error {
	target := filepath.Join(dir, name)
	if fi, err := os.Lstat(target); err == nil {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return symlinkError(target)
		case fi.IsDir():
			return isDirError(target)
		case !fi.Mode().IsRegular():
			return notRegular(target)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return pathError("stat", target, unwrapPathErr(err))
	}
	removeLeftovers(dir, name)

	prefix := tempPrefix(name) + writerTag() + "-"
	var f *os.File
	var tmp string
	for range 4 {
		tmp = filepath.Join(dir, prefix+tempRandom())
		var err error
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, 0o644)
		if err == nil {
			break
		}
		if errors.Is(err, fs.ErrExist) {
			if fi, lerr := os.Lstat(tmp); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return symlinkError(tmp)
			}
			continue
		}
		// Name the file the caller asked for, not our temporary one.
		return pathError("write", target, unwrapPathErr(err))
	}
	if f == nil {
		return pathError("create", tmp, fs.ErrExist)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return pathError("write", tmp, unwrapPathErr(err))
	}
	if durable {
		if err := f.Sync(); err != nil {
			return pathError("fsync", tmp, unwrapPathErr(err))
		}
	}
	if err := f.Close(); err != nil {
		return pathError("close", tmp, unwrapPathErr(err))
	}
	if err := os.Rename(tmp, target); err != nil {
		return pathError("rename", target, unwrapPathErr(err))
	}
	ok = true
	if !durable {
		return nil
	}
	return syncDir(dir)
}

// removeLeftovers removes temporary files of name left by writers that are
// gone: any older than a minute, and younger ones whose writer, named in the
// file name, is provably dead on this machine.
func removeLeftovers(dir, name string) {
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return
	}
	prefix := tempPrefix(name)
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		p := filepath.Join(dir, n)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if time.Since(fi.ModTime()) > tempLeftoverAge || tempWriterGone(strings.TrimPrefix(n, prefix)) {
			if err := os.Remove(p); err == nil {
				logger().Debug("runnerstate: removed a leftover temporary file", "path", p)
			}
		}
	}
}

// tempWriterGone parses "<pid>-<ticks>-<nshash>-<random>" and reports whether
// that writer is provably gone: same boot and PID namespace as us, and its pid
// is dead or belongs to a later process.
func tempWriterGone(tag string) bool {
	parts := strings.Split(tag, "-")
	if len(parts) != 4 {
		return false
	}
	self := writerTag()
	selfParts := strings.Split(self, "-")
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

// withStateLock runs fn holding dir's state lock: an exclusive flock on the
// directory itself (on Windows, a ".state.lock" file in it). It serialises
// read-modify-write of state files across goroutines and processes. The wait
// is bounded by stateLockWait.
func withStateLock(dir string, fn func() error) error {
	return withStateLockCtx(context.Background(), dir, fn)
}

// withStateLockCtx is withStateLock whose wait also ends with ctx.
func withStateLockCtx(ctx context.Context, dir string, fn func() error) error {
	ctx, cancel := context.WithTimeout(ctx, stateLockWait)
	defer cancel()
	l, err := acquireWait(ctx, dir, kindDir)
	if err != nil {
		var be *BusyError
		if errors.As(err, &be) && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return errorf("state lock on %s stayed busy for %v; a process is stuck writing state there (stopped?): %w", dir, stateLockWait, err)
		}
		return err
	}
	defer l.release()
	return fn()
}

// stateLockWait bounds the wait for a directory's state lock, which is only
// ever held for one small file write.
const stateLockWait = 30 * time.Second

// jsonLine marshals v as one line of JSON ended by "\n".
func jsonLine(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
