package runnerstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

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

// Usable reports whether r, as Running returned it for a held directory,
// is a runner to use now: its record is its own Publish (Ready), it is not
// leaving, and its process is the confirmed holder (Running fills Process
// only then). Package daemon's Dial connects to a server whose record is
// Usable. Start asks one thing more of the runner it returns: that no
// restart request is pending for it, since a runner asked to go is about
// to mark itself leaving; a client that only connects uses it until then.
func (r Record) Usable() bool {
	return r.Ready && r.Leaving == "" && r.Process.PID != 0
}

// Endpoint is one address a runner serves on, as net.Listen takes it.
type Endpoint struct {
	Network string `json:"network"` // "unix", "tcp", "tcp4" or "tcp6"
	Address string `json:"address"` // as net.Listen takes it; published as bound
	// Mode is the permission of a unix socket file (package daemon binds it
	// so whatever the umask): 0 means 0600, only its owner (and root) may
	// connect; 0660 lets its group's users connect too, 0666 everyone.
	// Published as bound (0600 for the default); none for another network
	// or an abstract socket, which have no file.
	Mode os.FileMode `json:"mode,omitempty"`
}

// ErrNotHolder reports a call that needs the directory's runner lock (Publish)
// from a process that did not take it through Acquire or Takeover, or whose
// lock is gone (released, or the lock file was replaced under it).
var ErrNotHolder = errors.New("runnerstate: this process does not hold the runner lock")

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
// A Publish that fails changes nothing: this process still holds dir, and
// runner.json keeps what it had (its previous record, or none), which
// Running and Status go on reporting. The runner decides, and the error says
// so: Publish again once the cause is fixed (a full disk, say), or release
// and exit if its record matters to others.
//
// Errors: ErrNotHolder (wrapped, naming dir) unless this process holds dir's
// runner lock through Acquire or Takeover and the lock file is still the one it
// locked; a symlink or directory at runner.json is refused naming the path;
// ErrNotDurable when the record is in place but its directory could not be
// synced; ErrNewerProtocol (wrapped, naming the file and both protocol
// numbers) when a state file of dir says a protocol newer than this
// build's, and nothing is written; a *BusyError naming .state.lock when
// another process held it for 30 s; otherwise the system's error naming the
// path. Touches runner.json and a temporary file beside it.
func Publish(dir string, rec Record) error {
	if err := ownDir("Publish", dir); err != nil {
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

// PublishNotReady writes rec as this runner's runner.json in dir as Publish
// does, but with Ready false: the record of a runner that holds dir and is
// not ready yet, for example one whose listeners are bound (rec.Endpoints)
// while it loads its data. Start waits past it and Status reports it not
// ready; it tells no readiness to Start's caller or a service manager, and
// a runner marked leaving stays so. Package daemon's Listen writes a
// server's record with it, and the etcd module a leader's; a runner built
// on neither needs it for the same step.
//
// Errors: ErrNotHolder (wrapped, naming dir) unless this process holds
// dir's runner lock through Acquire or Takeover and the lock file is still
// the one it locked; a symlink or directory at runner.json is refused
// naming the path; ErrNotDurable when the record is in place but its
// directory could not be synced; otherwise the system's error naming the
// path. Touches runner.json and a temporary file beside it.
func PublishNotReady(dir string, rec Record) error {
	rec.Ready = false
	return publish(dir, rec)
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
	if err := checkEndpoints(dir, rec.Endpoints); err != nil {
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
	err = withStateLock(dir, func(stateHeld) error {
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
		err = public(durable.WriteToAll(dir, RecordName, data))
		if ready && (err == nil || errors.Is(err, ErrNotDurable)) {
			h.SetPublished()
		}
		return err
	})
	return leaving, err
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

// recordMemo remembers the last decoding of runner.json: a probe reads the
// same bytes again and again while a runner runs, and decoding them is a
// third of what it costs.
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
)

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
