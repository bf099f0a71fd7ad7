package runnerstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runnerstate/runnerstate/internal/bridge"
	"github.com/runnerstate/runnerstate/internal/durable"
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
func (id Identity) String() string { return liveness.Identity(id).String() }

// Self returns this process's identity. It is computed once.
func Self() Identity { return Identity(liveness.Current()) }

// sameProcess reports whether two identities name the same process
// incarnation (liveness.Identity.SameProcess).
func sameProcess(a, b Identity) bool { return liveness.Identity(a).SameProcess(liveness.Identity(b)) }

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
	// Ready is true once the runner has published its record (Publish
	// always writes true): it is what Start waits for. The record a
	// Takeover writes at admission, before the runner's first Publish, has
	// false, and so has the record of a runner that is leaving. A record
	// read without the field was written by a build older than v0.3, whose
	// admission record (a placeholder) has no field to tell it from the
	// runner's own Publish: it counts as ready only once it carries
	// MaxParallel, Specs or Meta, which such a placeholder never does. So
	// an older runner that publishes none of them is never seen as ready
	// by Start (docs/protocol.md).
	Ready bool `json:"ready"`
	// LockFD is the number of the descriptor through which the holder
	// locks runner.lock, in the holder's process; Publish fills it in on
	// Linux (0 elsewhere). It lets a probe confirm the holder from
	// /proc/<pid>/fdinfo/<LockFD> without opening runner.lock (see
	// Running). A hint like the pid: it proves nothing until the kernel
	// confirms it.
	LockFD int `json:"lock_fd,omitempty"`
	// Program names what the runner is (for example "idxd"): Takeover and
	// Start given a Program refuse a directory whose verified holder names
	// another one (ErrOtherProgram). Empty: not said.
	Program string `json:"program,omitempty"`
	// Version is the runner's build version (for example "v1.4.2"). The root
	// package only records it; package daemon compares versions.
	Version string `json:"version,omitempty"`
	// Endpoints are where the runner serves, as bound (a unix socket's
	// absolute path; the port picked for ":0").
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// Leaving is set once the runner is going, and says why: RestartDrain or
	// RestartNow (a restart request WatchRestart delivered), RestartLost (its
	// lock file was deleted or replaced), "idle" or "closed" (package
	// daemon). A leaving runner has Ready false and is never ready again:
	// Start never returns it, it waits for it to go.
	Leaving string `json:"leaving,omitempty"`
}

// Endpoint is one address a runner serves on, as net.Listen takes it.
type Endpoint struct {
	Network string `json:"network"` // "unix", "tcp", "tcp4" or "tcp6"
	Address string `json:"address"` // as net.Listen takes it; published as bound
}

// ErrNotHolder reports a call that needs the directory's runner lock (Publish)
// from a process that did not take it through Acquire or Takeover, or whose
// lock is gone (released, or the lock file was replaced under it).
var ErrNotHolder = errors.New("runnerstate: this process does not hold the runner lock")

// ErrNotDurable reports a change to a file in the directory that was made,
// but whose directory could not be synced after it (an fsync of the
// directory failed, or the directory could not be opened for it): the new
// content is in place and every reader sees it at once, but it is not known
// to survive a power loss, after which either the old state or the new may
// be found, never a mix. The next write that succeeds in the same directory
// syncs it and makes it durable. The error names the file and the
// directory, and wraps the system's error (errors.Is(err, syscall.EIO)).
//
// What a caller does: treat the change as made (it is, for every process
// that reads now) and the disk as suspect. SaveLines may be called again;
// AppendLine must not be (the line is there, and would be there twice);
// Publish's record describes a live process, which a power loss ends
// anyway, so a runner may go on (it still holds the directory).
var ErrNotDurable = durable.ErrNotDurable

// maxRecordSize bounds what is read of a small JSON state file (runner.json,
// restart.json, gate.json, scope.owner.json): a runaway or hostile 50 MB file
// is refused, not read whole.
const maxRecordSize = 1 << 20

// maxStateSize bounds what LoadLines and AppendLine read.
const maxStateSize = 64 << 20

// Publish writes rec as this runner's runner.json in dir, atomically. It fills
// rec.PID and rec.Process with this process's identity, rec.StartedAt with
// the time the lock was taken when it is zero, rec.Program and rec.Version
// with those given to Takeover when both are empty, and sets rec.Ready: the
// runner is ready, and a Start waiting for it returns. A holder that
// WatchRestart has marked leaving stays so: its record is written with
// Ready false and Leaving kept, and no readiness is told. The first Publish of
// the process that succeeds also tells a service manager the runner is ready
// (READY=1 and MAINPID over $NOTIFY_SOCKET, when set; a failure to send is
// logged once and never fails Publish), and the process that started this
// one through Start (through the descriptor Start passed it). runner.json is
// 0644: every local user can read it, Meta included, so never put a secret
// there.
//
// A Publish that fails changes nothing but runner.json, and not even that:
// this process still holds dir (the kernel lock is the authority, and no
// other runner is admitted), and runner.json keeps what it had (the previous
// record of this runner, or nothing after Acquire), so Running and Status go
// on naming this runner, from runner.lock, with its previous record or none.
// The runner decides: go on and call Publish again once the cause is fixed
// (a full disk, say), or release and exit if its record matters to others.
// The error says so.
//
// Errors: ErrNotHolder (wrapped, naming dir) unless this process holds dir's
// runner lock through Acquire or Takeover and the lock file is still the one it
// locked; a symlink or directory at runner.json is refused naming the path;
// ErrNotDurable when the record is in place but its directory could not be
// synced; ErrNewerProtocol (wrapped, naming the file and both protocol
// numbers) when a state file of dir says a protocol newer than this
// build's, and nothing is written; otherwise the system's error naming the
// path. Touches runner.json and a temporary file beside it.
func Publish(dir string, rec Record) error {
	if err := checkDir("Publish", dir); err != nil {
		return err
	}
	if err := checkProtocol(dir, false); err != nil {
		return err
	}
	rec.Ready = true
	leaving, err := publishAs(dir, rec)
	if (err == nil || errors.Is(err, ErrNotDurable)) && leaving == "" {
		notifyReady(dir)
	}
	if err != nil && !errors.Is(err, ErrNotHolder) && !errors.Is(err, ErrNotDurable) {
		return fmt.Errorf("%w; this process still holds %s, and %s keeps its previous content: call Publish again once that is fixed, or release", err, dir, RecordName)
	}
	return err
}

// The cluster module writes a leader's admission record through
// bridge.PublishStarting: Ready false, like Takeover's own.
func init() {
	bridge.PublishStarting = func(dir string, rec any) error {
		r, ok := rec.(Record)
		if !ok {
			return errorf("publish %s: %T is not a Record", filepath.Join(dir, RecordName), rec)
		}
		r.Ready = false
		return publish(dir, r)
	}
}

// publish is Publish without the note that the hold stands, for an
// admission that lets its hold go when it cannot publish.
func publish(dir string, rec Record) error {
	_, err := publishAs(dir, rec)
	return err
}

// publishAs writes rec as this process's runner.json in dir. A holder that
// is leaving (markLeaving) keeps its mark: the record is written with Ready
// false and Leaving set, whatever rec says, and leaving says why. A record
// with Ready true that is written makes the hold published, so that a
// leaving mark undone (unmarkLeaving) gives the record its Ready back.
func publishAs(dir string, rec Record) (leaving string, err error) {
	if err := checkDir("Publish", dir); err != nil {
		return "", err
	}
	h := holdOf(dir)
	if h == nil {
		return "", fmt.Errorf("%w: %s (take it with Acquire or Takeover first)", ErrNotHolder, filepath.Join(dir, LockName))
	}
	if lost, why := h.Lost(); lost {
		return "", fmt.Errorf("%w: %s", ErrNotHolder, why)
	}
	self := Self()
	rec.PID = self.PID
	rec.Process = self
	rec.LockFD = 0
	if runtime.GOOS == "linux" { // where /proc/<pid>/fdinfo can confirm it
		rec.LockFD = h.LockFD()
	}
	if rec.StartedAt.IsZero() {
		rec.StartedAt = h.AcquiredAt()
	}
	ready := rec.Ready
	err = withStateLock(dir, func() error {
		// Read under the state lock, as markLeaving writes it.
		rec.Leaving = ""
		if program, version := h.Description(); rec.Program == "" && rec.Version == "" {
			rec.Program, rec.Version = program, version
		}
		if leaving = h.Leaving(); leaving != "" {
			rec.Ready, rec.Leaving = false, leaving
		}
		data, err := protocolLine(rec)
		if err != nil {
			return errorf("publish %s: %w", filepath.Join(dir, RecordName), err)
		}
		if len(data) > maxRecordSize {
			return pathError("publish", filepath.Join(dir, RecordName), fmt.Errorf("the record is %d bytes, over the %d a reader accepts; keep Meta small", len(data), maxRecordSize))
		}
		err = public(durable.Write(dir, RecordName, data))
		if ready && (err == nil || errors.Is(err, ErrNotDurable)) {
			h.SetPublished()
		}
		return err
	})
	return leaving, err
}

// fileState is what reading a small state file found (durable.State).
type fileState = durable.State

const (
	fileAbsent  = durable.Absent
	fileOK      = durable.OK
	fileCorrupt = durable.Corrupt
)

// readState reads the small JSON state file at path with parse
// (durable.ReadState), in this package's words. A file that cannot be read
// or parsed is reported as fileCorrupt with the reason, which names the
// path; it is never modified here.
func readState[T any](path string, parse func([]byte) (T, error)) (T, fileState, error) {
	v, state, err := durable.ReadState(path, maxRecordSize, parse)
	return v, state, public(err)
}

// unreadable reports whether err, readState's for a fileCorrupt file, says
// it could not be read at all (durable.Unreadable).
func unreadable(err error) bool { return durable.Unreadable(err) }

// readFile reads up to max bytes of the file at path without following a
// symlink or blocking on a FIFO (durable.ReadFile), in this package's words.
func readFile(path string, limit int) ([]byte, error) {
	data, err := durable.ReadFile(path, limit)
	if errors.Is(err, durable.ErrTooLarge) {
		return data, durable.ErrTooLarge
	}
	return data, public(err)
}

// readRecord reads runner.json.
func readRecord(dir string) (Record, fileState, error) {
	sr, state, err := readStoredRecord(dir)
	return sr.Record, state, err
}

// storedRecord is runner.json as read: the Record, and the protocol number
// the file says (protocolOf), which is no field of Record's.
type storedRecord struct {
	Record
	protocol int
}

// readStoredRecord reads runner.json with its protocol number, for the
// probes (Running, Status), which read it once.
func readStoredRecord(dir string) (storedRecord, fileState, error) {
	return readState(filepath.Join(dir, RecordName), recordMemo.Parse)
}

// recordMemo and lockLineMemo remember the last decoding of runner.json and
// of a lock file's line: a probe reads the same bytes again and again while
// a runner runs, and decoding them is a third of what it costs.
var (
	recordMemo = durable.NewLast(func(data []byte) (storedRecord, error) {
		rec, err := parseRecord(data)
		return storedRecord{Record: rec, protocol: protocolOf(data)}, err
	}, func(r storedRecord) storedRecord {
		r.Specs = slices.Clone(r.Specs)
		r.Meta = slices.Clone(r.Meta)
		r.Endpoints = slices.Clone(r.Endpoints)
		return r
	})
	lockLineMemo = durable.NewLast(func(data []byte) (lockContent, error) {
		lc, ok := parseLockLine(data)
		if !ok {
			return lockContent{}, errNoHolder
		}
		return lc, nil
	}, func(lc lockContent) lockContent { return lc })
)

var errNoHolder = errors.New("names no holder")

// parseRecord parses runner.json content. A record must be a JSON object that
// names a positive pid.
func parseRecord(data []byte) (Record, error) {
	var rec Record
	if err := durable.DecodeObject(data, &rec); err != nil {
		return Record{}, err
	}
	if !liveness.ValidPID(rec.PID) {
		return Record{}, fmt.Errorf("names no valid pid (pid %d)", rec.PID)
	}
	if rec.Process.PID != 0 && rec.Process.PID != rec.PID {
		return Record{}, fmt.Errorf("pid %d disagrees with its process identity's pid %d", rec.PID, rec.Process.PID)
	}
	rec.Ready = readyOf(data, rec)
	return rec, nil
}

// lockContent is the line a holder writes into its lock file: its identity
// and the descriptor it holds the lock through, with which any reader can
// confirm the lock from /proc/<pid>/fdinfo/<fd> in one small read.
type lockContent struct {
	Identity
	FD int `json:"fd,omitempty"`
}

// parseLockLine parses the first line of a lock file: the holder's
// lockContent as JSON, or a bare decimal pid from older runners (which
// carries no start identity, so it can never be verified). ok is false for
// anything else, including a pid <= 0.
func parseLockLine(data []byte) (lc lockContent, ok bool) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return lockContent{}, false
	}
	if data[0] == '{' {
		if err := json.Unmarshal(data, &lc); err != nil || !liveness.ValidPID(lc.PID) || lc.FD < 0 {
			return lockContent{}, false
		}
		return lc, true
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil || !liveness.ValidPID(pid) {
		return lockContent{}, false
	}
	return lockContent{Identity: Identity{PID: pid}}, true
}

// parseLockContent is parseLockLine's identity.
func parseLockContent(data []byte) (Identity, bool) {
	lc, ok := parseLockLine(data)
	return lc.Identity, ok
}

// keepCorrupt is how many set-aside copies of one state file are kept.
const keepCorrupt = 10

// setAside renames an unreadable state file to a name of its own,
// <name>.corrupt-<time>, keeping the keepCorrupt newest copies, and logs it;
// what names the file in the log ("file", "runner record"). It returns why
// the file could not be moved, nil when it was. Called only under the
// runner lock.
func setAside(dir, name, what string, why error) error {
	path := filepath.Join(dir, name)
	aside, err := durable.SetAside(dir, name, corruptSuffix, keepCorrupt)
	if aside == "" {
		warnOnce("aside:"+path, "runnerstate: could not set aside an unreadable "+what, "path", path, "err", why, "rename_err", err)
		return public(err)
	}
	logger().Warn("runnerstate: set aside an unreadable "+what, "path", path, "aside", aside, "err", why)
	return nil
}

// removeOwnRecord removes dir's runner.json when it names self, for a hold
// that lost its runner.lock: without the lock nothing serialises it with a
// newer runner, which may already be admitted (when both lock files were
// removed), so another's record is never removed (durable.RemoveIf).
func removeOwnRecord(dir string, self Identity) {
	_, err := durable.RemoveIf(dir, RecordName, maxRecordSize, func(data []byte) bool {
		rec, err := parseRecord(data)
		return err == nil && sameProcess(rec.Process, self)
	})
	if err != nil {
		logger().Info("runnerstate: release could not remove the runner's record", "dir", dir, "err", public(err))
	}
}

// jsonLine marshals v as one line of JSON ended by "\n".
func jsonLine(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// SaveLines replaces the state file dir/name with lines, one per line, each
// ended by "\n", atomically: a reader or a crash sees the old content or the
// new, never a mix. name must be a plain file name and not one of the files
// this package manages. A line may not contain "\n".
//
// Errors name the path: a symlink or a directory at the path is refused, a
// bad name or line is refused; ErrNotDurable when the new content is in
// place but its directory could not be synced (call SaveLines again to make
// sure it is durable); otherwise the system's error, and the old content is
// intact. Creates dir (0755) when it does not exist; touches dir/name and a
// temporary file beside it, under the directory's state lock.
func SaveLines(dir, name string, lines []string) error {
	if err := checkStateName(dir, name); err != nil {
		return err
	}
	data, err := joinLines(filepath.Join(dir, name), lines)
	if err != nil {
		return err
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	return withStateLock(dir, func() error {
		return public(durable.Write(dir, name, data))
	})
}

// joinLines is what SaveLines writes to path for lines: each ended by "\n".
// A line with a newline in it is refused, and so is content over the 64 MiB
// LoadLines reads.
func joinLines(path string, lines []string) ([]byte, error) {
	data, bad := encodeLines(lines)
	if bad >= 0 {
		return nil, pathError("save", path, fmt.Errorf("line %d contains a newline", bad+1))
	}
	if len(data) > maxStateSize {
		return nil, pathError("save", path, errors.New("larger than the 64 MiB LoadLines reads"))
	}
	return data, nil
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
	data, err := readLines(filepath.Join(dir, name), "read")
	if err != nil || data == nil {
		return nil, err
	}
	return splitLines(data), nil
}

// readLines reads a whole state file of lines for op: nil, nil when it does
// not exist; a file over 64 MiB is refused.
func readLines(path, op string) ([]byte, error) {
	data, err := readFile(path, maxStateSize)
	switch {
	case err == nil:
		if data == nil {
			data = []byte{}
		}
		return data, nil
	case isNotExist(err):
		return nil, nil
	case errors.Is(err, durable.ErrTooLarge):
		return nil, pathError(op, path, errors.New("larger than 64 MiB"))
	}
	return nil, err
}

// encodeLines is the content of a file of lines: each line ended by "\n".
// bad is the index of the first line that contains a "\n" itself, which
// would read back as two (data is nil then), or -1.
func encodeLines(lines []string) (data []byte, bad int) {
	var b bytes.Buffer
	for i, l := range lines {
		if strings.ContainsRune(l, '\n') {
			return nil, i
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes(), -1
}

// splitLines is the lines of data, the content of a file of lines, without
// their "\n"; a last line without its "\n" is a line too. Empty data gives
// an empty, non-nil slice.
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

// addLine is data, the content of a file of lines, with line added as
// its last line: a last line of data without its "\n" is completed first.
// data itself is not changed.
func addLine(data []byte, line string) []byte {
	out := make([]byte, 0, len(data)+len(line)+2)
	out = append(out, data...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, line...)
	return append(out, '\n')
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
// Errors are those of SaveLines, but ErrNotDurable says the line is there
// (every reader sees it) and only not known to survive a power loss: do not
// append it again, or it is there twice; the next write that succeeds in dir
// makes it durable.
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
		old, err := readLines(path, "append")
		if err != nil {
			return err
		}
		data := addLine(old, line)
		if len(data) > maxStateSize {
			return pathError("append", path, errors.New("would grow past the 64 MiB LoadLines reads"))
		}
		return public(durable.Write(dir, name, data))
	})
}

// MigrateFile renames the state file dir/oldName to dir/newName, for a
// program that renames a file between versions. It is safe to race: an
// existing newName wins and oldName is removed; a directory at oldName is left
// where it is and the call returns nil; a caller that finds oldName already
// gone (another process migrated it first) returns nil.
//
// Errors name the path: a symlink at either name is refused; ErrNotDurable
// when the file is at its new name (or oldName removed, newName winning) but
// the directory could not be synced: a second MigrateFile finds nothing to
// do, and the next write that succeeds in dir makes it durable; otherwise
// the system's error, and both names are as they were. Runs under the
// directory's state lock.
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
		return public(durable.Migrate(dir, oldName, newName))
	})
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

// reservedName reports whether name is one of dirFiles: a file, or a family
// of files, that runnerstate keeps in a directory it owns.
func reservedName(name string) bool {
	for _, f := range dirFiles {
		if f.matches(name) {
			return true
		}
	}
	return false
}

// dirFiles are the files runnerstate keeps in the directories it owns: a
// runner directory, a scope directory (AcquireScope) and a data root
// (SyncRunning). It is the one list of them: the reserved names of the
// state-file calls (reservedName), the fault matrix's paths, and the files
// table in docs/protocol.md (TestDocsListTheDirectorysFiles holds it to
// this one) all come from it. A file the package adds goes here.
var dirFiles = []dirFile{
	{name: LockName, kind: kindLock, home: homeRunner, mode: 0o600, writer: "Acquire, Takeover",
		purpose: "the kernel lock; the holder's Identity and the descriptor it locked through"},
	{name: treeLockName, kind: kindLock, home: homeRunner, mode: 0o600, writer: "Acquire, Takeover",
		purpose: "the tree lock, the other of a hold's two, which Inherit lends to jobs"},
	{name: RecordName, kind: kindState, home: homeRunner, mode: 0o644, writer: "Publish",
		purpose: "the Record the holder published"},
	{name: RestartName, kind: kindState, home: homeRunner, mode: 0o644, writer: "RequestRestart",
		purpose: "a pending restart request"},
	{name: gateName, kind: kindState, home: homeRunner, mode: 0o644, writer: "Takeover",
		purpose: "the takeover gate: the waiting starters and the current escalation"},
	{name: startLockName, kind: kindLock, home: homeRunner, mode: 0o600, writer: "Start",
		purpose: "serialises Start's attempts; held only while one begins"},
	{name: startName, kind: kindState, home: homeRunner, mode: 0o644, writer: "Start",
		purpose: "Start's current attempt, and how it ended when it died before it was ready"},
	{name: logName, kind: kindLog, home: homeRunner, mode: 0o600, writer: "a runner Start started",
		purpose: "its stdout and stderr, appended"},
	{name: stateLockName, kind: kindLock, home: homeRunner, mode: 0o644, writer: "every read-modify-write of the state files",
		purpose: "the state lock; empty"},
	{name: "<name>" + corruptSuffix + "-<time>", kind: kindSetAside, of: []string{RecordName, RestartName}, home: homeRunner, mode: 0o644, writer: "a fresh holder",
		purpose: "an unreadable state file set aside whole; the keepCorrupt newest kept"},
	{name: ".<name>.tmp-*", kind: kindTemp, home: homeEvery, mode: 0o644, writer: "every write of a state file",
		purpose: "the new content before it is renamed over <name>; a leftover one is removed by the next writer"},
	{name: scopeLockName, kind: kindLock, home: homeScope, mode: 0o644, writer: "AcquireScope",
		purpose: "the scope's kernel lock; the holder's Identity"},
	{name: scopeOwnerName, kind: kindState, home: homeScope, mode: 0o644, writer: "AcquireScope",
		purpose: "the ScopeOwner: the data dir the holder serves"},
	{name: syncLockName, kind: kindLock, home: homeDataRoot, mode: 0o644, writer: "SyncRunning, NoSyncRunning",
		purpose: "the sync mark: shared by syncs, exclusive for a reset"},
}

// dirFile is one file of dirFiles, or one family of files.
type dirFile struct {
	name    string      // the file's name; for a family, its pattern
	kind    dirFileKind // how it is kept
	of      []string    // kindSetAside: the state files whose copies these are
	home    dirHome     // the directory it is kept in
	mode    fs.FileMode // the mode it is created with, before the umask
	writer  string      // the calls that write it
	purpose string
}

// dirFileKind says how a file of dirFiles is kept.
type dirFileKind uint8

const (
	kindLock     dirFileKind = iota + 1 // its flock is its point; opened in place, never unlinked
	kindState                           // written whole: a temporary file renamed over it
	kindLog                             // appended to
	kindSetAside                        // a family: <name>.corrupt-<time> for each name in of
	kindTemp                            // a family: .<name>.tmp-<writer>-<random>, a write in flight
)

// dirHome names the directory a file of dirFiles is kept in.
type dirHome uint8

const (
	homeRunner   dirHome = iota + 1 // a runner directory (Acquire, Takeover, Start)
	homeScope                       // a scope directory (AcquireScope)
	homeDataRoot                    // a data root (SyncRunning, NoSyncRunning)
	homeEvery                       // each of the above
)

// family reports whether f names a family of files rather than one.
func (f dirFile) family() bool { return f.kind == kindSetAside || f.kind == kindTemp }

// matches reports whether name is f's file, or one of f's family.
func (f dirFile) matches(name string) bool {
	switch f.kind {
	case kindSetAside:
		for _, of := range f.of {
			if strings.HasPrefix(name, of+corruptSuffix) {
				return true // a set-aside copy, which a later set-aside may remove
			}
		}
		return false
	case kindTemp:
		return durable.IsTemp(name)
	}
	return name == f.name
}

// readyOf is the Ready of a runner.json whose bytes are data and which
// decoded as rec. A record with the field says it. One without it was
// written by a build older than v0.3, which wrote the same fields at
// admission (a placeholder: pid, process, started_at) as in a Publish that
// describes nothing: it counts as ready only once it carries MaxParallel,
// Specs or Meta, which a placeholder never does.
func readyOf(data []byte, rec Record) bool {
	if rec.Ready {
		return true
	}
	var probe struct {
		Ready *bool `json:"ready"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.Ready != nil {
		return false
	}
	return rec.MaxParallel != 0 || len(rec.Specs) > 0 || len(rec.Meta) > 0 && string(rec.Meta) != "null"
}
