package runnerstate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/runnerstate/runnerstate/internal/locktable"
)

// protocolVersion is the number of the runner directory's protocol this
// build reads and writes (docs/protocol.md). The layout of v0.2 and v0.3,
// which wrote no number, is protocol 1, and so is a file without one.
// Additions that older readers ignore keep the number; only a change that
// would keep a build of the previous protocol from sharing a directory with
// this one raises it, and then the previous protocol's reader and writer
// stay for at least one release.
const protocolVersion = 1

// protocolKey is the member every JSON file the package writes begins with.
const protocolKey = "protocol"

// protocolLine is v marshalled as one line of JSON ended by "\n", with
// "protocol": protocolVersion as the object's first member. v must marshal
// to an object that has no member of that name.
func protocolLine(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(data) < 2 || data[0] != '{' {
		return nil, fmt.Errorf("%T is not a JSON object", v)
	}
	out := make([]byte, 0, len(data)+16)
	out = fmt.Appendf(out, `{"%s":%d`, protocolKey, protocolVersion)
	if data[1] != '}' {
		out = append(out, ',')
	}
	out = append(out, data[1:]...)
	return append(out, '\n'), nil
}

// protocolOf is the protocol number the JSON object data (or a lock file's
// first line) says: 1 when it says none (a file of v0.2 or v0.3, a bare
// pid), 0 when its number is not a positive integer, which no build
// writes, and which counts as newer than any: a reader cannot tell what
// the rest of the file means.
func protocolOf(data []byte) int {
	if !bytes.Contains(data, []byte(`"`+protocolKey+`"`)) {
		return 1 // the common case, and every older file: no decoding
	}
	var probe struct {
		Protocol json.RawMessage `json:"protocol"`
	}
	if json.Unmarshal(bytes.TrimSpace(data), &probe) != nil {
		return 1 // not an object (a bare pid), or not this package's: the file's own parser decides
	}
	if probe.Protocol == nil || string(probe.Protocol) == "null" {
		return 1
	}
	n, err := strconv.ParseInt(string(probe.Protocol), 10, 64)
	if err != nil || n < 1 {
		return 0
	}
	return int(min(n, 1<<30))
}

// newerProtocolError is the refusal of a file at path that says protocol n
// (protocolOf), newer than this build's.
func newerProtocolError(path string, n int) error {
	if n == 0 {
		return fmt.Errorf("%w: %s carries a protocol number that is not a positive integer, and this build speaks protocol %d; it is left as it is (see docs/protocol.md)", ErrNewerProtocol, path, protocolVersion)
	}
	return fmt.Errorf("%w: %s says protocol %d, and this build speaks protocol %d; it is left as it is: upgrade this program, or let the newer build's runner go first (see docs/protocol.md)", ErrNewerProtocol, path, n, protocolVersion)
}

// newerProtocol reports whether n, protocolOf's, is a protocol this build does not
// speak.
func newerProtocol(n int) bool { return n != protocolVersion && (n == 0 || n > protocolVersion) }

// The files whose protocol number the calls that write or admit check:
// the JSON state files, and the lock files' identity lines. Running and
// Status read only the state files (they never open a file that carries a
// lock, see Running).
var (
	protocolStateFiles = []string{RecordName, RestartName, gateName, startName, LingerName}
	protocolLockFiles  = []string{LockName, treeLockName}
)

// checkProtocol refuses dir when one of its files says a protocol newer
// than this build's (newerProtocolError, wrapping ErrNewerProtocol): the
// state files, and the lock files too when locks is true. A file that is
// absent or cannot be read is no refusal: each call's own reading of it
// decides. It locks nothing and writes nothing.
func checkProtocol(dir string, locks bool) error {
	names := protocolStateFiles
	if locks {
		names = append(protocolLockFiles[:len(protocolLockFiles):len(protocolLockFiles)], names...)
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		lock := name == LockName || name == treeLockName
		limit := maxRecordSize
		if lock {
			limit = maxLockContent
		}
		data, err := readFile(path, limit)
		if err != nil {
			continue
		}
		if i := bytes.IndexByte(data, '\n'); lock && i >= 0 {
			data = data[:i] // the identity line
		}
		if n := protocolOf(data); newerProtocol(n) {
			return newerProtocolError(path, n)
		}
	}
	return nil
}

// treeLockSettle is how long a holder of runner.lock may hold no tree.lock
// before Status says it predates the tree lock: a runner of protocol 1
// takes tree.lock right after runner.lock (microseconds apart), and lets
// runner.lock go again at once when it cannot have tree.lock.
const treeLockSettle = 200 * time.Millisecond

// treeLockSettleStep is how often the kernel's lock list is read again
// while a holder settles in.
const treeLockSettleStep = 10 * time.Millisecond

// belowFloor is Status's warning when the process holding dir's runner.lock
// has held no tree.lock for longer than treeLockSettle: it predates the
// tree lock (v0.1, below protocol 1's floor), and the jobs it runs are
// not tracked. Read from the kernel's lock list (locktable.Holders), touching
// no lock; "" where the kernel lists no holders (outside Linux), when the
// holder is not visible from here (another PID namespace), or when it
// holds tree.lock or lets runner.lock go within the settle time. Only the
// slow path costs anything: a holder that Status confirmed from runner.json
// and its fdinfo (lock_fd, which builds before v0.3 never wrote) is of a
// build that takes tree.lock.
func belowFloor(dir string, st lockState) string {
	if st.via == viaRecordLock || !locktable.ListsHolders() {
		return ""
	}
	lockPath, treePath := filepath.Join(dir, LockName), filepath.Join(dir, treeLockName)
	deadline := time.Now().Add(treeLockSettle)
	for {
		pid := exclusiveHolder(lockPath)
		if pid <= 0 {
			return "" // free now, or its holder is not visible from here
		}
		tree, _, known := locktable.Holders(treePath) // no file: no tree lock
		if !known {
			return ""
		}
		if slices.ContainsFunc(tree, func(h locktable.Holder) bool { return h.PID == pid }) {
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("pid %d has held %s for over %v without %s: it predates the tree lock (a build before v0.2, below protocol 1's floor; see docs/protocol.md), so the jobs it runs are not tracked: no status shows them, and a runner admitted after it runs beside them", pid, lockPath, treeLockSettle, treePath)
		}
		time.Sleep(treeLockSettleStep) // bounded by treeLockSettle: the kernel says nothing when a lock is taken
	}
}

// exclusiveHolder is the pid the kernel names for the exclusive flock on
// path, 0 when there is none or it is not visible from here.
func exclusiveHolder(path string) int {
	holders, _, known := locktable.Holders(path)
	if !known {
		return 0
	}
	for _, h := range holders {
		if h.Exclusive && h.PID > 0 {
			return h.PID
		}
	}
	return 0
}
