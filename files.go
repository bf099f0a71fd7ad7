package runnerstate

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/gate"
)

// The files of a runner directory.
const (
	LockName    = "runner.lock"  // the kernel lock, with the holder's identity in it
	RecordName  = "runner.json"  // the holder's published Record
	RestartName = "restart.json" // a pending restart request
)

// Internal files of a runner directory.
const (
	gateName      = gate.Name     // the takeover gate's waiting starters
	treeLockName  = "tree.lock"   // the tree lock, the other of a hold's pair, which Inherit hands on
	stateLockName = ".state.lock" // the state lock, serialising state writes
	corruptSuffix = ".corrupt"    // an unreadable state file set aside by a fresh holder: <name>.corrupt-<time>, the 10 newest kept
)

// Start's files in a runner directory.
const (
	startLockName = "start.lock" // serialises Start's attempts
	startName     = "start.json" // the current attempt
	logName       = "runner.log" // a started runner's output, by default
)

// The files of a scope directory and of a data root.
const (
	scopeLockName  = "scope.lock"       // the scope's kernel lock; the holder's identity in it
	scopeOwnerName = "scope.owner.json" // the holder's ScopeOwner, a hint for refusal messages
	syncLockName   = "sync.lock"        // the sync mark in a data root
)

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
	{name: LingerName, kind: kindState, home: homeRunner, mode: 0o644, writer: "package daemon's lingering server",
		purpose: "a server that handed the directory over and still serves the connections it had accepted: its identity, deadline, kill_at, open count, end"},
	{name: startLockName, kind: kindLock, home: homeRunner, mode: 0o600, writer: "Start",
		purpose: "serialises Start's attempts: held while one begins, while its end is recorded, and while its child marks it ready"},
	{name: startName, kind: kindState, home: homeRunner, mode: 0o644, writer: "Start",
		purpose: "Start's current attempt, and how it ended when it died before it was ready"},
	{name: logName, kind: kindLog, home: homeRunner, mode: 0o600, writer: "a runner Start started",
		purpose: "its stdout and stderr, appended"},
	{name: stateLockName, kind: kindLock, home: homeRunner, mode: 0o600, writer: "every read-modify-write of the state files",
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

// maxRecordSize bounds what is read of a small JSON state file (runner.json,
// restart.json, gate.json, scope.owner.json): a runaway or hostile 50 MB file
// is refused, not read whole.
const maxRecordSize = 1 << 20

// maxStateSize bounds what LoadLines and AppendLine read.
const maxStateSize = 64 << 20

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
	v, state, err := durable.ReadStateOwned(path, maxRecordSize, parse, func(id durable.FileID) bool { return ownedFile(path, id) })
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

// SaveLines replaces the state file dir/name with lines, one per line, each
// ended by "\n", atomically: a reader or a crash sees the old content or the
// new, never a mix. name must be a plain file name and not one of the files
// this package manages. A line may not contain "\n".
//
// Errors name the path: a symlink or a directory at the path is refused, a
// bad name or line is refused; ErrNotDurable when the new content is in
// place but its directory could not be synced (call SaveLines again to make
// sure it is durable); otherwise the system's error, and the old content is
// intact; a *BusyError naming .state.lock when another process held it for
// 30 s. Creates dir (0700) when it does not exist; touches dir/name and a
// temporary file beside it, under the directory's state lock.
func SaveLines(dir, name string, lines []string) error {
	if err := checkStateName(dir, name); err != nil {
		return err
	}
	data, err := joinLines(filepath.Join(dir, name), lines)
	if err != nil {
		return err
	}
	if err := ownDir("SaveLines", dir); err != nil {
		return err
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	return withStateLock(dir, func(stateHeld) error {
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

// AppendLine adds line to the end of the state file dir/name, creating it
// when absent. Every line already there is kept as it is, comments and lines
// this package does not understand included; a last line without its "\n" is
// completed first. Concurrent appends, from goroutines or processes, are
// serialised by the directory's state lock and drop nothing, and the file is
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
	if err := ownDir("AppendLine", dir); err != nil {
		return err
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	return withStateLock(dir, func(stateHeld) error {
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
// directory's state lock, waited for at most 30 s (then a *BusyError naming
// .state.lock).
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
	if err := ownDir("MigrateFile", dir); err != nil {
		return err
	}
	return withStateLock(dir, func(stateHeld) error {
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
