//go:build linux

package liveness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startIsBootRelative: Linux start ticks count from boot, so they identify a
// process only together with the boot id.
const startIsBootRelative = true

// clkTck is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture Go supports.
const clkTck = 100

// testProcRoot, when set, is where per-pid evidence is read instead of
// /proc: tests point it at an empty directory to play a /proc mounted with
// hidepid.
var testProcRoot atomic.Pointer[string]

// procRoot is where per-pid evidence is read: /proc, or testProcRoot.
func procRoot() string {
	if p := testProcRoot.Load(); p != nil {
		return *p
	}
	return "/proc"
}

// testPidfdOpen, when set, replaces unix.PidfdOpen: tests take the kill(2)
// path with it.
var testPidfdOpen atomic.Pointer[func(pid, flags int) (int, error)]

// pidfdOpen is unix.PidfdOpen, or testPidfdOpen.
func pidfdOpen(pid, flags int) (int, error) {
	if fn := testPidfdOpen.Load(); fn != nil {
		return (*fn)(pid, flags)
	}
	return unix.PidfdOpen(pid, flags)
}

// hostFacts are this process's kernel-wide facts, read once.
type hostFacts struct {
	bootID, pidNS, machine, hostname string
	btime                            int64 // boot time, Unix seconds; 0 unknown
}

var facts = sync.OnceValue(func() hostFacts {
	f := hostFacts{pidNS: nsID("/proc/self/ns/pid"), machine: machineID(), hostname: hostname()}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		f.bootID = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "btime "); ok {
				f.btime, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				break
			}
		}
	}
	return f
})

// nsID returns "dev:ino" of a namespace file, or "" when it cannot be read.
func nsID(path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return ""
	}
	return strconv.FormatUint(st.Dev, 10) + ":" + strconv.FormatUint(st.Ino, 10)
}

// machineID hashes /etc/machine-id, else /var/lib/dbus/machine-id, else
// returns "". (gopsutil is not used here: its Linux fallback is the boot
// id, which would make every reboot look like another machine.)
func machineID() string {
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		b, err := os.ReadFile(p)
		if s := strings.TrimSpace(string(b)); err == nil && s != "" && s != "uninitialized" {
			return hashMachine(s)
		}
	}
	return ""
}

func currentIdentity() Identity {
	f := facts()
	id, err := identityFrom("/proc", os.Getpid(), f)
	if err != nil {
		return Identity{PID: os.Getpid(), BootID: f.bootID, PIDNS: f.pidNS, Machine: f.machine, Hostname: f.hostname}
	}
	return id
}

func lookup(pid int) (Identity, error) {
	probeHook(pid)
	return identityFrom(procRoot(), pid, facts())
}

func identityFrom(root string, pid int, f hostFacts) (Identity, error) {
	st, err := readStat(procFile(root, pid, "stat"))
	if se, bad := err.(*statError); bad {
		return Identity{}, fmt.Errorf("liveness: lookup pid %d: %w", pid, se.err)
	}
	if err != nil {
		return Identity{}, lookupErr(pid, err)
	}
	if (st.State == 'Z' || st.State == 'X') && zombieDead(root, pid, false, nil) {
		return Identity{}, fmt.Errorf("liveness: lookup pid %d: zombie (state %c): %w", pid, st.State, ErrNoProcess)
	}
	status, err := readStatus(root, pid)
	if err != nil {
		return Identity{}, lookupErr(pid, err)
	}
	if status.tgid != pid {
		return Identity{}, fmt.Errorf("liveness: lookup pid %d: a thread of process %d: %w", pid, status.tgid, ErrNoProcess)
	}
	id := Identity{
		PID:        pid,
		StartTicks: st.StartTicks,
		BootID:     f.bootID,
		PIDNS:      f.pidNS,
		Machine:    f.machine,
		Hostname:   f.hostname,
	}
	if f.btime > 0 && st.StartTicks < 1<<62 {
		t := st.StartTicks
		id.StartTime = time.Unix(f.btime+int64(t/clkTck), int64(t%clkTck)*int64(time.Second/clkTck)).UTC()
	}
	return id, nil
}

func lookupErr(pid int, err error) error {
	if notExist(err) {
		if gone, _ := killExited(pid); gone {
			return fmt.Errorf("liveness: lookup pid %d: %w", pid, ErrNoProcess)
		}
		return fmt.Errorf("liveness: lookup pid %d: the process exists but its /proc entry is hidden (hidepid?): %w", pid, err)
	}
	return fmt.Errorf("liveness: lookup pid %d: %w", pid, err)
}

func procFile(root string, pid int, name string) string {
	return root + "/" + strconv.Itoa(pid) + "/" + name
}

func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// status is what this package reads from /proc/<pid>/status.
type status struct {
	tgid    int // thread group id: the pid of the process pid belongs to
	threads int // live threads in the group
}

// readStatus reads the Tgid and Threads lines of /proc/<pid>/status.
func readStatus(root string, pid int) (status, error) {
	path := procFile(root, pid, "status")
	b, err := os.ReadFile(path)
	if err != nil {
		return status{}, err
	}
	st := status{tgid: -1, threads: -1}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		switch k {
		case "Tgid":
			st.tgid, err = strconv.Atoi(strings.TrimSpace(v))
		case "Threads":
			st.threads, err = strconv.Atoi(strings.TrimSpace(v))
		}
		if err != nil {
			return status{}, fmt.Errorf("%s: %s: %w", path, k, err)
		}
	}
	if st.tgid < 0 {
		return status{}, fmt.Errorf("%s: no Tgid line", path)
	}
	return st, nil
}

// zombieDead decides about a pid whose stat state is Z or X. Usually the
// process has exited and awaits its reaper; but a leader whose main thread
// exited while other threads run shows Z too, and that process is alive.
// With a pidfd, its readability decides; without, the thread count does.
func zombieDead(root string, pid int, pinned bool, exited func() (bool, error)) bool {
	if pinned {
		gone, err := exited()
		return err == nil && gone
	}
	st, err := readStatus(root, pid)
	return err != nil || st.threads <= 1
}

// pidfdReadable reports whether the pidfd polls readable, which it does
// once the whole thread group has exited (zombie included).
func pidfdReadable(fd int) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll pidfd: %w", err)
		}
		if n == 0 {
			return false, nil
		}
		if fds[0].Revents&unix.POLLNVAL != 0 {
			return false, fmt.Errorf("poll pidfd: %w", unix.EBADF)
		}
		return fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0, nil
	}
}

// openPidfd opens a non-blocking pidfd; on kernels without PIDFD_NONBLOCK
// (before 5.10) it opens a plain one and sets O_NONBLOCK itself.
func openPidfd(pid int) (int, error) {
	fd, err := pidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if !errors.Is(err, unix.EINVAL) {
		return fd, err
	}
	if fd, err = pidfdOpen(pid, 0); err != nil {
		return -1, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// pin probes id.PID (rules 5 and 6 of Check) and returns a Process only for
// Alive.
func pin(id Identity) (*Process, Verdict, string) { return probe(id, true) }

// checkLive is Check's probe: pin without keeping the pin, and without
// handing the pidfd to the runtime's poller, which a pin needs for Wait but
// a verdict does not (it saves three system calls of the dozen a check
// makes).
func checkLive(id Identity) (Verdict, string) {
	_, v, why := probe(id, false)
	return v, why
}

// checkAfter is CheckHolder's reading: /proc/<pid>/stat alone, after the
// caller's evidence (see CheckHolder for why that is exact).
func checkAfter(id Identity) (Verdict, string) {
	pid := id.PID
	probeHook(pid)
	st, err := readStat(procFile(procRoot(), pid, "stat"))
	switch {
	case err != nil:
		if _, bad := err.(*statError); bad {
			return Unverifiable, err.Error()
		}
		return unreadable(pid, err, func() (bool, error) { return killExited(pid) })
	case st.State == 'Z' || st.State == 'X':
		return Dead, fmt.Sprintf("pid %d is a zombie: exited, not yet reaped (state %c)", pid, st.State)
	case st.StartTicks != id.StartTicks:
		return Stale, fmt.Sprintf("start ticks %d != %d recorded (pid reused)", st.StartTicks, id.StartTicks)
	}
	return selfOrAlive(pid, Alive), fmt.Sprintf("start ticks %d match, after the process showed it holds it", id.StartTicks)
}

// probe is pin (keep true) and checkLive (keep false).
func probe(id Identity, keep bool) (*Process, Verdict, string) {
	pid := id.PID
	probeHook(pid)
	fd, err := openPidfd(pid)
	switch {
	case err == nil:
		v, why := inspect(pid, id.StartTicks, true, func() (bool, error) { return pidfdReadable(fd) })
		v = selfOrAlive(pid, v)
		if v != Alive || !keep {
			unix.Close(fd)
			return nil, v, why
		}
		f := os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid))
		rc, err := f.SyscallConn()
		if err != nil {
			f.Close()
			return nil, Unverifiable, "pidfd: " + err.Error()
		}
		return newProcess(id, &handle{f: f, rc: rc}), v, why
	case errors.Is(err, unix.ESRCH):
		return nil, Dead, fmt.Sprintf("no process with pid %d (pidfd_open: ESRCH)", pid)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		// Not a thread-group leader: EINVAL on older kernels, ENOENT on
		// recent ones (observed on 6.18).
		v, why := notLeader(pid, err)
		return nil, v, why
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		// No pidfd (kernel before 5.3, or a seccomp filter): verify by pid.
		h := &handle{}
		p := newProcess(id, h)
		v, why := p.verify()
		if v = selfOrAlive(pid, v); v != Alive || !keep {
			return nil, v, why
		}
		return p, v, why + " (no pidfd: " + err.Error() + ")"
	default:
		return nil, Unverifiable, fmt.Sprintf("pidfd_open(%d): %v", pid, err)
	}
}

func selfOrAlive(pid int, v Verdict) Verdict {
	if v == Alive && pid == Current().PID {
		return Self
	}
	return v
}

// notLeader explains an EINVAL or ENOENT from pidfd_open: pid exists but
// is not a thread-group leader, i.e. it is a thread id.
func notLeader(pid int, perr error) (Verdict, string) {
	if gone, err := killExited(pid); err != nil {
		return Unverifiable, err.Error()
	} else if gone {
		return Dead, fmt.Sprintf("no process with pid %d (kill: ESRCH)", pid)
	}
	st, err := readStatus(procRoot(), pid)
	switch {
	case err != nil:
		return Unverifiable, fmt.Sprintf("pidfd_open(%d): %v, and status unreadable: %v", pid, perr, err)
	case st.tgid != pid:
		return Stale, fmt.Sprintf("pid %d is a thread of process %d, not a process (pidfd_open: %v)", pid, st.tgid, perr)
	}
	return Unverifiable, fmt.Sprintf("pidfd_open(%d): %v", pid, perr)
}

// inspect reads /proc/<pid>/stat and status and compares them with the
// recorded start ticks. exited reports whether the process is gone: through
// the pidfd when pinned (then it describes the pinned process itself), else
// through kill(pid, 0) (then it only says whether anything holds the pid).
// When pinned, exited is asked before and after the /proc reads: if it is
// still false afterwards, the pinned process held pid throughout (a pid is
// only freed once its process has exited and been reaped), so the /proc
// evidence was its own.
func inspect(pid int, want uint64, pinned bool, exited func() (bool, error)) (Verdict, string) {
	if pinned {
		if gone, err := exited(); err != nil {
			return Unverifiable, err.Error()
		} else if gone {
			return Dead, fmt.Sprintf("pid %d exited (pidfd readable)", pid)
		}
	}
	st, err := readStat(procFile(procRoot(), pid, "stat"))
	if err != nil {
		if _, bad := err.(*statError); bad {
			return Unverifiable, err.Error()
		}
		return unreadable(pid, err, exited)
	}
	if (st.State == 'Z' || st.State == 'X') && zombieDead(procRoot(), pid, pinned, exited) {
		return Dead, fmt.Sprintf("pid %d is a zombie: exited, not yet reaped (state %c)", pid, st.State)
	}
	if st.StartTicks != want {
		return Stale, fmt.Sprintf("start ticks %d != %d recorded (pid reused)", st.StartTicks, want)
	}
	if !pinned {
		// Without a pidfd nothing has yet said pid is a process and not a
		// thread id. pidfd_open has: it refuses a thread that does not lead
		// its group, which saves reading status on the common path.
		status, err := readStatus(procRoot(), pid)
		if err != nil {
			return unreadable(pid, err, exited)
		}
		if status.tgid != pid {
			return Stale, fmt.Sprintf("pid %d is a thread of process %d, not a process", pid, status.tgid)
		}
	}
	if gone, err := exited(); err != nil {
		return Unverifiable, err.Error()
	} else if gone {
		return Dead, fmt.Sprintf("pid %d exited while being checked", pid)
	}
	return Alive, fmt.Sprintf("start ticks %d match", want)
}

// statError is a /proc/<pid>/stat that was read but does not parse.
type statError struct{ err error }

func (e *statError) Error() string { return e.err.Error() }

// readStat reads and parses a /proc/<pid>/stat file with raw system calls
// into a pooled buffer: an os.File would register the descriptor with the
// runtime's poller and ask its flags, three more calls for one small read.
// A stat file is one record, produced whole by the first read; a short read
// is its end.
func readStat(path string) (Stat, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stat{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	bp := statBufs.Get().(*[]byte)
	defer statBufs.Put(bp)
	buf := *bp
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return Stat{}, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		n += m
		if m == 0 || n < len(buf) {
			break
		}
		buf = append(buf, make([]byte, len(buf))...) // a comm full of ')' and spaces: grow
		*bp = buf
	}
	st, err := ParseStat(buf[:n])
	if err != nil {
		return Stat{}, &statError{err}
	}
	return st, nil
}

var statBufs = sync.Pool{New: func() any { b := make([]byte, 1024); return &b }}

// unreadable turns a failed /proc read into a verdict. A missing entry is
// Dead only when the process is known to have exited; otherwise /proc hides
// it (hidepid) and nothing is proven.
func unreadable(pid int, err error, exited func() (bool, error)) (Verdict, string) {
	gone, xerr := exited()
	switch {
	case xerr != nil:
		return Unverifiable, xerr.Error()
	case gone:
		return Dead, fmt.Sprintf("pid %d exited (no /proc entry)", pid)
	case notExist(err):
		return Unverifiable, fmt.Sprintf("/proc/%d hidden by hidepid: the process exists but cannot be read", pid)
	}
	return Unverifiable, fmt.Sprintf("pid %d exists but /proc is unreadable: %v", pid, err)
}

// handle is the Linux pin: a pidfd registered with the runtime poller, or
// nothing (f == nil) on the kill(2) path.
type handle struct {
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool
}

func (h *handle) close() error {
	h.closed.Store(true)
	if h.f == nil {
		return nil
	}
	return h.f.Close()
}

var errClosed = fmt.Errorf("liveness: pin closed: %w", os.ErrClosed)

// exited polls the pidfd through the runtime (so a concurrent Close cannot
// recycle the descriptor underneath).
func (h *handle) exited() (bool, error) {
	if h.closed.Load() {
		return false, errClosed
	}
	var gone bool
	var perr error
	if err := h.rc.Control(func(fd uintptr) { gone, perr = pidfdReadable(int(fd)) }); err != nil {
		return false, errClosed
	}
	return gone, perr
}

func (p *Process) verify() (Verdict, string) {
	h, pid := p.h, p.id.PID
	if h.closed.Load() {
		return Unverifiable, "pin closed"
	}
	probeHook(pid)
	if h.f != nil {
		return inspect(pid, p.id.StartTicks, true, h.exited)
	}
	exited := func() (bool, error) { return killExited(pid) }
	if gone, err := exited(); err != nil {
		return Unverifiable, err.Error()
	} else if gone {
		return Dead, fmt.Sprintf("no process with pid %d (kill: ESRCH)", pid)
	}
	return inspect(pid, p.id.StartTicks, false, exited)
}

func signalSupported(Signal) error { return nil }

func (p *Process) signal(sig Signal) error {
	pid := p.id.PID
	if p.h.f == nil {
		// No pidfd: verified just before; killVerified sends and verifies
		// again.
		return p.killVerified(sig)
	}
	var serr error
	if err := p.h.rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return fmt.Errorf("liveness: signal %v to pid %d: %w", sig, pid, errClosed)
	}
	if errors.Is(serr, unix.ESRCH) {
		return fmt.Errorf("liveness: signal %v to pid %d: exited first: %w", sig, pid, ErrNotAlive)
	}
	if serr != nil {
		return fmt.Errorf("liveness: signal %v to pid %d: pidfd_send_signal: %w", sig, pid, serr)
	}
	return nil
}

func (p *Process) exitedNow() bool {
	if p.h.f == nil {
		v, _ := p.Verify()
		return v == Dead || v == Stale
	}
	gone, err := p.h.exited()
	return err == nil && gone
}

// wait blocks on the pidfd through the runtime poller: rc.Read parks the
// goroutine until epoll reports the pidfd readable (the process exited),
// and a read deadline set when ctx ends wakes it. Without a pidfd, or if the
// poller refused the pidfd, it polls every 5 ms.
func (p *Process) wait(ctx context.Context) error {
	h := p.h
	if h.f == nil {
		return pollExit(ctx, func() (bool, error) {
			if h.closed.Load() {
				return false, errClosed
			}
			return p.exitedNow(), nil
		})
	}
	if err := h.f.SetReadDeadline(time.Time{}); err != nil {
		if h.closed.Load() {
			return errClosed
		}
		return pollExit(ctx, h.exited) // not in the poller (os.ErrNoDeadline)
	}
	for {
		var mu sync.Mutex
		active := true
		stop := context.AfterFunc(ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if active {
				_ = h.f.SetReadDeadline(time.Unix(1, 0))
			}
		})
		var perr error
		err := h.rc.Read(func(fd uintptr) bool {
			gone, e := pidfdReadable(int(fd))
			if e != nil {
				perr = e
				return true
			}
			return gone
		})
		stop()
		mu.Lock()
		active = false // a late AfterFunc must not leave a deadline behind
		mu.Unlock()
		_ = h.f.SetReadDeadline(time.Time{})
		switch {
		case err == nil && perr == nil:
			return nil
		case perr != nil:
			return fmt.Errorf("liveness: wait pid %d: %w", p.id.PID, perr)
		case h.closed.Load():
			return errClosed
		case errors.Is(err, os.ErrDeadlineExceeded):
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue // not ours; cannot happen, but never report a false exit
		default:
			return fmt.Errorf("liveness: wait pid %d: %w", p.id.PID, err)
		}
	}
}

// pfExiting is PF_EXITING, the kernel's flag on a task in do_exit
// (include/linux/sched.h).
const pfExiting = 0x4

// Exiting reports whether id's process is on its way out: every thread of
// it has PF_EXITING set (/proc/<pid>/task/<tid>/stat, field 9), as once a
// SIGKILL has been acted on. Such a process may already have closed its
// files (the kernel closes them before the exit completes and its pidfd is
// readable), and nothing can stop its exit. A process that is not id's, or
// whose threads cannot be read, is not reported exiting.
func Exiting(id Identity) bool {
	if id.StartTicks == 0 {
		return false
	}
	task := procFile(procRoot(), id.PID, "task")
	tids, err := os.ReadDir(task)
	if err != nil {
		return false
	}
	leader, identified := strconv.Itoa(id.PID), false
	for _, tid := range tids {
		st, err := readStat(task + "/" + tid.Name() + "/stat")
		switch {
		case notExist(err):
			continue // that thread is gone already
		case err != nil || st.Flags&pfExiting == 0:
			return false
		case tid.Name() == leader:
			// The leader's start is the process's: it tells id's process
			// from another at its pid.
			if st.StartTicks != id.StartTicks {
				return false
			}
			identified = true
		}
	}
	return identified
}

// Stopped reports whether id's process is stopped (/proc/<pid>/stat state
// 'T', stopped by a signal such as SIGSTOP, or 't', stopped by a tracer),
// and the state letter. A process that is not id's (another start, or gone)
// or whose stat cannot be read is not reported stopped.
func Stopped(id Identity) (bool, byte) {
	st, err := readStat(procFile(procRoot(), id.PID, "stat"))
	if err != nil || id.StartTicks == 0 || st.StartTicks != id.StartTicks {
		return false, 0
	}
	return st.State == 'T' || st.State == 't', st.State
}
