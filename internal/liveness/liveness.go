// Package liveness answers two questions about a recorded process: "is the
// process this record names alive, provably?" and "signal it without ever
// hitting a recycled pid".
//
// It fails closed. A bare pid is never evidence: a process is only called
// [Alive] when its whole identity (pid, exact start identity, boot id, pid
// namespace, machine) is confirmed by the kernel, and only an [Alive]
// process may be pinned and signalled. Anything this package cannot prove is
// [Unverifiable], never [Dead]: in particular a permission error (EPERM) is
// never taken as death.
//
// Linux is the first-class platform, and all of this package's tests run
// there. The windows file's portable tests run in CI under Wine 8 (not on
// Windows itself). The darwin file is written against documented system
// interfaces and passes `GOOS=darwin go vet` (cross-checked from Linux), but
// it has never been run. On any other OS every answer except [Current] is
// [Unverifiable].
//
// Every verdict is a snapshot: by the time the caller acts on it the process
// may have exited. [Pin] and [Process] exist so that acting (signalling,
// waiting) happens against the verified process itself and not against
// whatever now owns its pid.
package liveness

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Identity names one process instance across time, precisely enough that a
// recycled pid is never mistaken for the process that once had it.
//
// It mirrors runnerstate.Identity field for field (same names, types, order
// and JSON tags), so the two convert with a plain type conversion.
//
// What is trusted: PID, StartTicks, BootID, PIDNS and Machine are compared
// exactly by [Check]. StartTime and Hostname are for people and logs only and
// are never evidence of anything. Instance is never compared by [Check]; it
// lets a reader tell two records written by the same pid apart.
type Identity struct {
	// Instance is 32 lowercase hex characters from crypto/rand, fixed for the
	// life of this process ([Current]); it is "" in identities from [Lookup].
	Instance string `json:"instance"`
	// PID is the process id as seen from the pid namespace PIDNS.
	PID int `json:"pid"`
	// StartTicks is the exact start identity of the process, compared without
	// tolerance; 0 means unknown (a legacy record). Its unit depends on the
	// OS that wrote it: on Linux, clock ticks since boot (field 22 of
	// /proc/<pid>/stat, USER_HZ = 100 per second); on darwin, microseconds
	// since the Unix epoch (kinfo_proc p_starttime); on windows, the process
	// creation time as a FILETIME (100-ns intervals since 1601-01-01 UTC).
	StartTicks uint64 `json:"start_ticks,omitempty"`
	// StartTime is when the process started, for display. On Linux it is
	// derived from the boot time and StartTicks and may be off by the clock
	// adjustments since boot; it is never compared.
	StartTime time.Time `json:"start_time,omitzero"`
	// BootID identifies the running kernel instance: on Linux
	// /proc/sys/kernel/random/boot_id, on darwin the sysctl
	// kern.bootsessionuuid; "" when unknown (always on windows).
	BootID string `json:"boot_id,omitempty"`
	// PIDNS is the pid namespace in which PID is meaningful, as "dev:ino"
	// (both decimal) of the namespace file; "" outside Linux.
	PIDNS string `json:"pid_ns,omitempty"`
	// Machine is the machine id, HMAC-SHA256 keyed with this package's
	// application key, the first 16 bytes in hex (32 characters), so the raw
	// id never leaves the machine; "" when unknown.
	Machine string `json:"machine,omitempty"`
	// Hostname is os.Hostname() of the writer, for display only.
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

// HasStart reports whether id carries a start identity (StartTicks != 0).
// A record without one can never be proven alive: a pid alone could be any
// later process.
func (id Identity) HasStart() bool { return id.StartTicks != 0 }

// SameProcess reports whether id and other name the same process
// incarnation: the same pid and start ticks, in the same boot and pid
// namespace, and the same Instance when both carry one. It compares the
// records only and asks the kernel nothing.
func (id Identity) SameProcess(other Identity) bool {
	if id.PID <= 0 || id.PID != other.PID || id.StartTicks != other.StartTicks {
		return false
	}
	if id.Instance != "" && other.Instance != "" && id.Instance != other.Instance {
		return false
	}
	return id.BootID == other.BootID && id.PIDNS == other.PIDNS
}

// ValidPID reports whether pid can name a process: positive and within a
// pid_t. A larger number read from a file is no pid at all: kill(2) would
// truncate it into another pid (4294967297 is pid 1, 4294967295 is -1:
// every process).
func ValidPID(pid int) bool { return pid > 0 && pid <= maxPID }

// Current returns the identity of this process. It is computed once, on the
// first call, and is safe for concurrent use. Fields this OS cannot provide
// are left empty (see [Identity]); on an unsupported OS only Instance, PID
// and Hostname are set.
func Current() Identity { return current() }

var current = sync.OnceValue(func() Identity {
	id := currentIdentity()
	id.Instance = newInstance()
	return id
})

// Lookup returns the identity of the live process pid now, with Instance "".
// Its BootID, PIDNS and Machine are this process's: pid is a number in this
// process's pid namespace on this kernel, so Check(Lookup(pid)) of a live
// process answers [Alive] (or [Self]).
//
// Errors: a pid <= 0 or above 2^31-1 is refused without probing anything
// (that error does not wrap [ErrNoProcess]). An error wrapping
// [ErrNoProcess] means there is no such process, or only a zombie, or pid is
// a thread id rather than a process. Any other error (a hidden /proc entry,
// a permission error, an unsupported OS, which wraps errors.ErrUnsupported)
// means the process may exist but could not be identified.
func Lookup(pid int) (Identity, error) {
	if pid <= 0 || pid > maxPID {
		return Identity{}, fmt.Errorf("liveness: lookup: invalid pid %d", pid)
	}
	return lookup(pid)
}

// Verdict is the answer of [Check]: what the evidence proves about the
// process a record names. Only [Alive] may be signalled.
type Verdict int

const (
	// Unverifiable: the evidence does not settle it, so nothing may be
	// done to the process. Produced by: a pid <= 0 or above 2^31-1; a
	// record without start identity (legacy); a record without a pid
	// namespace (or with one this process cannot compare); on Linux, a
	// record without a boot id or a kernel whose boot id cannot be read; a
	// process that exists but whose /proc entry is hidden (hidepid) or
	// unreadable; a permission error (EPERM, access denied); an unexpected
	// error from the kernel; any unsupported OS.
	Unverifiable Verdict = iota
	// Self: the record names this very process (same pid, same start
	// identity, same namespace and kernel). A process never signals itself
	// through this package.
	Self
	// Alive: the kernel shows a running process with the recorded pid and
	// exactly the recorded start identity, on this kernel and in this pid
	// namespace, and it is not a zombie.
	Alive
	// Dead: on this kernel and in this namespace, there is no process with
	// the pid (ESRCH), or it is a zombie (exited, not yet reaped by its
	// parent), or it exited while being checked. A leader whose main thread
	// alone has exited also shows state Z; while its other threads run it
	// is not Dead.
	Dead
	// Stale: the recorded process is gone although something may hold its
	// pid: the pid now belongs to a process with another start identity (pid
	// reused), the pid is a thread id rather than a process, or the machine
	// has rebooted since the record was written (different boot id, same
	// machine id).
	Stale
	// Foreign: the record was written on another machine: different boot id
	// and a machine id that is not ours (or unknown), or, without boot ids,
	// two known machine ids that differ. Never signalled.
	Foreign
	// OtherNamespace: the record was written on this kernel but in another
	// pid namespace (a container), so its pid means a different process
	// here. Never signalled.
	OtherNamespace
)

var verdictNames = [...]string{
	Unverifiable:   "unverifiable",
	Self:           "self",
	Alive:          "alive",
	Dead:           "dead",
	Stale:          "stale",
	Foreign:        "foreign",
	OtherNamespace: "other-namespace",
}

// String returns the verdict's lowercase name ("unverifiable", "self",
// "alive", "dead", "stale", "foreign", "other-namespace"), or "verdict(N)"
// for a value outside those.
func (v Verdict) String() string {
	if v >= 0 && int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// Check decides what the evidence proves about the process id names, and
// returns the verdict with a short phrase naming the evidence (for logs,
// e.g. "start ticks 123 != 456 recorded (pid reused)"). Each [Verdict]'s doc
// says which evidence produces it; Check weighs the evidence in this order
// and stops at the first step that settles the verdict:
//
//  1. the pid itself: none, or beyond a pid_t;
//  2. the kernel: by boot id, and by machine id where a boot id is missing
//     (the hostname is never evidence);
//  3. the PID namespace;
//  4. the start identity: a record without one is never proven alive.
//     Nothing is probed up to here;
//  5. the kernel's own view of the pid: on Linux pidfd_open first, which
//     pins the process, then /proc/<pid>/stat (and status without a pidfd),
//     then the pidfd polled once more: still not readable means the process
//     held the pid throughout, so the /proc evidence was its own. On darwin
//     sysctl kern.proc.pid and kill(pid, 0); on windows a process handle's
//     creation time and exit status;
//  6. all matching: [Self] when pid is this process, else [Alive].
//
// Check only reads. It never signals, and it does not keep anything open.
func Check(id Identity) (Verdict, string) {
	if v, why, done := precheck(id, Current()); done {
		return v, why
	}
	return checkLive(id)
}

// CheckHolder is Check for a process whose holding of something was just
// shown by the kernel in that process's own state (a lock in
// /proc/<pid>/fdinfo/<fd>), read by holds. It is cheaper than Check, and as
// exact, when the caller vouches for two things: id was written by the
// process it names (so id.PID is a process, not a thread, and that process
// existed before holds is called), and holds reads state that only the
// process with pid id.PID at that instant can show.
//
// The argument: holds is asked first, and the start identity of pid id.PID
// is read after it returns true. A pid names one process at a time, and a
// process that has exited never returns, so if the process found then is id
// (same pid, same start ticks), it existed throughout and it is the one holds
// saw. No pidfd is needed to pin it for that (a pin is for acting; see Pin).
//
// held is false when holds returned false (nothing is read then, and the
// verdict is Unverifiable: call Check), or when the process found is not id
// (Dead, Stale). On systems where the kernel's per-process state cannot be
// read, held is false.
func CheckHolder(id Identity, holds func() bool) (v Verdict, held bool, why string) {
	if v, why, done := precheck(id, Current()); done {
		return v, false, why
	}
	if !holds() {
		return Unverifiable, false, "the process does not show it holds it"
	}
	v, why = checkAfter(id)
	return v, v == Alive || v == Self, why
}

// Pin checks id like [Check] and, only when the verdict is [Alive], returns
// a [Process] that holds on to that very process (a pidfd on Linux, a process
// handle on windows) so that later signals and waits cannot reach a process
// that merely inherited the pid. The returned *Process is nil for every
// other verdict, [Self] included: a process never signals itself through
// this package. The caller must Close a non-nil Process.
//
// On Linux the pin is taken before /proc is read, so the verification
// describes the pinned process. Where no pidfd is available (kernels before
// 5.3, seccomp filters, darwin) the Process holds only the pid: every
// method re-verifies the identity by pid, and Signal verifies again after
// sending (see [Process.Signal]). That leaves a window of microseconds in
// which a recycled pid could be hit; only a pidfd closes it.
func Pin(id Identity) (*Process, Verdict, string) {
	if v, why, done := precheck(id, Current()); done {
		return nil, v, why
	}
	return pin(id)
}

// Process is a verified, pinned process returned by [Pin]. Its methods are
// safe for concurrent use. It does not reap the process: a child of this
// process still needs its own wait (exec.Cmd.Wait) after it has exited.
type Process struct {
	id      Identity
	h       *handle       // per-OS pin
	exited  atomic.Bool   // once observed, the process stays exited
	waitSem chan struct{} // serialises Wait, so one waiter owns the pin's deadline
	once    sync.Once
	err     error // from the first Close
}

func newProcess(id Identity, h *handle) *Process {
	return &Process{id: id, h: h, waitSem: make(chan struct{}, 1)}
}

// PID returns the pinned process's pid (0 for a zero Process).
func (p *Process) PID() int {
	if p == nil {
		return 0
	}
	return p.id.PID
}

// Verify re-verifies the pinned process now, through the pin, and returns
// the verdict with its evidence like [Check]: [Alive] while it runs,
// [Dead] once it has exited (zombie included), [Stale] when (without a
// pidfd) its pid now names another process, and [Unverifiable] after Close
// or when the evidence cannot be read.
func (p *Process) Verify() (Verdict, string) {
	if p == nil || p.waitSem == nil {
		return Unverifiable, "not a pinned process"
	}
	v, why := p.verify()
	if v == Dead || v == Stale {
		p.exited.Store(true)
	}
	return v, why
}

// Signal re-verifies the process and, only if it is still [Alive], sends
// sig to it: through the pidfd on Linux (pidfd_send_signal, which can only
// reach the pinned process), with kill(2) and a second verification
// afterwards where there is no pidfd, and on windows only SIGKILL, as
// TerminateProcess through the pinned handle.
//
// Errors: an error wrapping [ErrNotAlive] when the process is not [Alive]
// (nothing is sent), including when it exits just before the signal; an
// error wrapping errors.ErrUnsupported for a signal this OS cannot send
// (windows: anything but SIGKILL); otherwise the kernel's error, wrapped.
// On Unix, signal 0 only verifies, like kill(pid, 0).
func (p *Process) Signal(sig Signal) error {
	if p == nil || p.waitSem == nil {
		return fmt.Errorf("liveness: signal %v: not a pinned process: %w", sig, ErrNotAlive)
	}
	if err := signalSupported(sig); err != nil {
		return fmt.Errorf("liveness: signal %v to pid %d: %w", sig, p.id.PID, err)
	}
	if v, why := p.Verify(); v != Alive {
		return fmt.Errorf("liveness: not signalling pid %d: %s (%s): %w", p.id.PID, v, why, ErrNotAlive)
	}
	if fn := testHookSignal.Load(); fn != nil {
		(*fn)(p.id.PID, sig)
	}
	return p.signal(sig)
}

// Wait blocks until the pinned process has exited, and returns nil then
// (a zombie counts as exited: Wait does not reap). It returns ctx.Err() when
// ctx ends first, and an error wrapping os.ErrClosed after Close.
//
// It wakes promptly: on Linux the pidfd is registered with Go's network
// poller, so an exit wakes it at once without polling, and cancellation sets
// a read deadline. Without a pidfd (old kernels, darwin) it polls every 5 ms;
// on windows it waits on the process handle in 5 ms slices so that ctx is
// honoured. Concurrent Waits are served one at a time.
func (p *Process) Wait(ctx context.Context) error {
	if p == nil || p.waitSem == nil {
		return errors.New("liveness: wait: not a pinned process")
	}
	if p.Exited() {
		return nil
	}
	select {
	case p.waitSem <- struct{}{}:
		defer func() { <-p.waitSem }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := p.wait(ctx); err != nil {
		return err
	}
	p.exited.Store(true)
	return nil
}

// Exited reports whether the pinned process is known to have exited (a
// zombie counts), checking now through the pin. After Close it reports only
// what was observed before.
func (p *Process) Exited() bool {
	if p == nil || p.waitSem == nil {
		return false
	}
	if p.exited.Load() {
		return true
	}
	if p.exitedNow() {
		p.exited.Store(true)
		return true
	}
	return false
}

// Close releases the pin (closes the pidfd or handle). It is idempotent:
// later calls return the first call's result. A Wait in progress returns an
// error wrapping os.ErrClosed.
func (p *Process) Close() error {
	if p == nil || p.waitSem == nil {
		return nil
	}
	p.once.Do(func() { p.err = p.h.close() })
	return p.err
}

var (
	// ErrNoProcess means no process has the pid (or only a zombie does, or
	// the pid is a thread id).
	ErrNoProcess = errors.New("liveness: no such process")
	// ErrNotAlive means a signal was refused because the pinned process is
	// no longer verified alive; nothing was sent.
	ErrNotAlive = errors.New("liveness: process not verified alive")
)

// Stat is what this package reads from /proc/<pid>/stat.
type Stat struct {
	State      byte   // field 3: 'R', 'S', 'D', 'Z', 'X', ...
	PPID       int    // field 4: parent pid
	StartTicks uint64 // field 22: start time in clock ticks since boot
	Flags      uint32 // field 9: the kernel's PF_* flags (include/linux/sched.h)
}

// ParseStat parses the contents of /proc/<pid>/stat. The command name
// (field 2) is parenthesised and may itself contain spaces, parentheses and
// newlines, so the fields are read after the last ')'. It returns an error,
// never panics, for anything that is not a well-formed stat line: no
// "(comm)", fewer than 22 fields, a state that is not one ASCII letter, a
// negative or non-decimal ppid, flags that are not a decimal uint32, a
// start time that is not a decimal uint64.
func ParseStat(data []byte) (Stat, error) {
	open := strings.IndexByte(string(data), '(')
	end := strings.LastIndexByte(string(data), ')')
	if open < 0 || end < open {
		return Stat{}, errors.New("liveness: stat: no (comm) field")
	}
	if _, err := strconv.ParseUint(strings.TrimSpace(string(data[:open])), 10, 31); err != nil {
		return Stat{}, fmt.Errorf("liveness: stat: bad pid field: %w", err)
	}
	f := strings.Fields(string(data[end+1:]))
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 22-2 {
		return Stat{}, fmt.Errorf("liveness: stat: %d fields after comm, want at least 20", len(f))
	}
	if len(f[0]) != 1 || !isLetter(f[0][0]) {
		return Stat{}, fmt.Errorf("liveness: stat: bad state %q", f[0])
	}
	st := Stat{State: f[0][0]}
	ppid, err := strconv.ParseUint(f[1], 10, 31)
	if err != nil {
		return Stat{}, fmt.Errorf("liveness: stat: bad ppid: %w", err)
	}
	st.PPID = int(ppid)
	flags, err := strconv.ParseUint(f[9-3], 10, 32)
	if err != nil {
		return Stat{}, fmt.Errorf("liveness: stat: bad flags: %w", err)
	}
	st.Flags = uint32(flags)
	if st.StartTicks, err = strconv.ParseUint(f[22-3], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("liveness: stat: bad start time: %w", err)
	}
	return st, nil
}

func isLetter(b byte) bool { return b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' }

// precheck applies rules 1 to 4 of Check, which need no probing. done is
// true when they settle the verdict.
func precheck(id, cur Identity) (v Verdict, why string, done bool) {
	if id.PID <= 0 {
		return Unverifiable, "no pid", true
	}
	if id.PID > maxPID {
		// kill(2) and friends take a 32-bit pid: a larger one would be
		// truncated into some other process's pid.
		return Unverifiable, fmt.Sprintf("pid %d out of range", id.PID), true
	}
	sameKernel := false
	switch {
	case id.BootID != "" && cur.BootID != "":
		if id.BootID != cur.BootID {
			if id.Machine != "" && id.Machine == cur.Machine {
				return Stale, fmt.Sprintf("rebooted: boot id %s, now %s, same machine", id.BootID, cur.BootID), true
			}
			return Foreign, fmt.Sprintf("boot id %s != %s and machine %s", id.BootID, cur.BootID, machineWord(id.Machine, cur.Machine)), true
		}
		sameKernel = true
	case id.Machine != "" && cur.Machine != "" && id.Machine != cur.Machine:
		return Foreign, fmt.Sprintf("machine %s != %s", id.Machine, cur.Machine), true
	}
	switch {
	case id.PIDNS == cur.PIDNS:
	case !sameKernel:
		return Unverifiable, fmt.Sprintf("pid namespace %q not comparable with %q: kernel not established by boot id", id.PIDNS, cur.PIDNS), true
	case id.PIDNS == "":
		return Unverifiable, "no pid namespace in record", true
	case cur.PIDNS == "":
		return Unverifiable, fmt.Sprintf("record names pid namespace %s, ours is unknown", id.PIDNS), true
	default:
		return OtherNamespace, fmt.Sprintf("pid namespace %s != ours %s", id.PIDNS, cur.PIDNS), true
	}
	if !id.HasStart() {
		return Unverifiable, "legacy record without start identity", true
	}
	if !sameKernel && startIsBootRelative {
		if cur.BootID == "" {
			return Unverifiable, "boot id of this kernel unknown; start ticks count from boot", true
		}
		return Unverifiable, "no boot id in record; start ticks count from boot", true
	}
	return 0, "", false
}

func machineWord(rec, cur string) string {
	switch {
	case rec == "":
		return "unknown in record"
	case cur == "":
		return "unknown here"
	}
	return "differs"
}

// machineKey keys the HMAC of the machine id, so that records carry an
// application-specific value rather than the raw id (the same idea as
// systemd's sd_id128_get_machine_app_specific).
const machineKey = "github.com/runnerstate/runnerstate/internal/liveness machine v1"

// hashMachine returns the 32-hex-character Machine value for a raw machine
// id, or "" for an empty one.
func hashMachine(raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(machineKey))
	m.Write([]byte(raw))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

func newInstance() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	return hex.EncodeToString(b[:])
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

// maxPID is the largest pid this package will probe: pids are 32-bit signed
// in every kernel interface it uses.
const maxPID = 1<<31 - 1

// Test hooks: called, when set, before anything probes a pid (the pid) and
// before a signal is sent. Tests use them to prove nothing was probed or
// sent; they are nil in production.
var (
	testHookProbe  atomic.Pointer[func(pid int)]
	testHookSignal atomic.Pointer[func(pid int, sig Signal)]
)

func probeHook(pid int) {
	if fn := testHookProbe.Load(); fn != nil {
		(*fn)(pid)
	}
}
