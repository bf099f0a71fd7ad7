//go:build linux

package runnerstate

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/advice"
	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The fault-injection matrix: every public operation that writes or locks,
// crossed with the system calls on its path and the errors the kernel really
// returns there, each cell one helper process (the test binary re-executed,
// role "fault") performing one operation while strace injects one error into
// one call. The library meets the injected error exactly as it would meet a
// real one; the test then checks the outcome from outside, and the locks
// while the helper still lives (the kernel drops them all once it exits).
//
//	go test -run '^TestFaultMatrix$' -v .                          # a smoke subset
//	RUNNERSTATE_FAULTS=full go test -run '^TestFaultMatrix$' -v .  # every cell (CI)
//
// The smoke subset, which the ordinary go test ./... runs in a few seconds,
// is four operations (Acquire, Publish, release, SaveLines), the first
// occurrence of each class of call, its first error; TestFaultRegressions
// (every bug the matrix found, kept as a regression) runs by default too. The full matrix
// (about 20 s on 2 cores, its figures logged as "fault matrix figures: ...")
// is .ci/run's step "fault injection (strace)".
//
// Counting. strace counts an injection's when= per system call and per
// tracee, that is per thread, and the Go scheduler moves goroutines between
// threads. So the helper does its setup first (a hold for Publish and
// release, say), then runs the operation on a goroutine locked to a thread of
// its own (runtime.LockOSThread) and names that thread; strace attaches to
// that one thread (-p TID), so counting starts at zero when the operation is
// about to start and sees nothing else. And strace is given every path of
// the cell (-P, one per file the operations may touch, temporary files
// included: the helper names those by a counter), so that only the calls on
// the cell's files are traced and counted; what the thread reads elsewhere
// (/proc/locks, another process's fdinfo, whose sizes depend on the whole
// machine) never shifts the count. Nothing is hard-coded: a dry run of each
// operation, traced with -y (paths of descriptors shown), lists every call
// the thread makes on the cell's files, and the cells are planned from it: for
// each class of call, its first, a middle and its last occurrence (when=N is
// that call's number among the thread's calls of its name on those files).
// Each cell's own trace is then checked to have injected the very call
// planned (same number, same path); a cell whose injection landed elsewhere
// fails as a harness fault. A goroutine the operation starts (a
// Takeover's watcher, a parked lock waiter) runs on another thread and is not
// faulted: the matrix covers the calling goroutine's path, which is every
// write these operations make.
//
// The errors. Each class of call gets the errors the kernel documents for it
// on a local or network filesystem, not the full cross product (see
// faultErrnos); EAGAIN goes only to flock(2), where a non-blocking lock says
// "busy" with it. Two limits of strace shape the list: an injected error
// replaces the call, so close(2) never runs and its descriptor stays open,
// which Linux never does (close frees the descriptor whatever it returns):
// closes of lock files, which would keep their lock, are left out; the rest
// are kept (a kept descriptor of a temporary file or a directory changes
// nothing). And an injected rename or unlink did nothing, which is what the
// kernel's own errors there mean.
//
// What every cell asserts: no panic and no hang (each helper is bounded and
// killed when it overstays); an error names the path and says what to do, or
// the call succeeded (an EINTR is always retried, except close's); the state
// acknowledged before the fault is intact, or replaced whole by the new state
// when the error says it is in place but not known durable; no temporary
// file is left, or the next writer of its name removes it; no lock is left
// held by a call that returned an error; and a runner's own belief that it
// holds the directory matches what the kernel says.
const envFaultMatrix = "RUNNERSTATE_FAULTS"

// faultErrnos are the errors tried on each class of call: what the kernel
// returns there.
//
//   - opens that create or write: ENOSPC and EDQUOT (no room for the inode or
//     the entry), EMFILE and ENFILE (no descriptor left, per process and
//     system-wide), EACCES, EROFS, EINTR (a slow filesystem);
//   - opens for reading: EMFILE, ENFILE, EACCES, EIO, EINTR;
//   - reads: EIO, EINTR; writes: ENOSPC, EDQUOT, EIO, EINTR;
//   - ftruncate: EIO, EINTR; fchmod: EROFS, EIO;
//   - fsync of a file: EIO, ENOSPC, EDQUOT (writeback failed), EINTR; of a
//     directory: EIO, ENOSPC, EDQUOT;
//   - close of a temporary file or a directory: EIO, EINTR (NFS reports
//     write-back errors at close);
//   - rename: ENOSPC, EDQUOT, EIO, EROFS, EACCES; unlink: EIO, EROFS, EACCES;
//   - flock: EINTR, EAGAIN (held: the busy answer), ENOLCK (no locks here);
//   - stat: EACCES (a path component), EIO; fstat: EIO; getdents: EIO.
var faultErrnos = map[string][]syscall.Errno{
	"openat(w)":  {unix.ENOSPC, unix.EDQUOT, unix.EMFILE, unix.ENFILE, unix.EACCES, unix.EROFS, unix.EINTR},
	"openat(r)":  {unix.EMFILE, unix.ENFILE, unix.EACCES, unix.EIO, unix.EINTR},
	"read":       {unix.EIO, unix.EINTR},
	"pread64":    {unix.EIO, unix.EINTR},
	"write":      {unix.ENOSPC, unix.EDQUOT, unix.EIO, unix.EINTR},
	"pwrite64":   {unix.ENOSPC, unix.EDQUOT, unix.EIO, unix.EINTR},
	"ftruncate":  {unix.EIO, unix.EINTR},
	"fchmod":     {unix.EROFS, unix.EIO},
	"fsync":      {unix.EIO, unix.ENOSPC, unix.EDQUOT, unix.EINTR},
	"fdatasync":  {unix.EIO, unix.ENOSPC, unix.EDQUOT, unix.EINTR},
	"fsync(dir)": {unix.EIO, unix.ENOSPC, unix.EDQUOT},
	"close":      {unix.EIO, unix.EINTR},
	"renameat":   {unix.ENOSPC, unix.EDQUOT, unix.EIO, unix.EROFS, unix.EACCES},
	"renameat2":  {unix.ENOSPC, unix.EDQUOT, unix.EIO, unix.EROFS, unix.EACCES},
	"unlinkat":   {unix.EIO, unix.EROFS, unix.EACCES},
	"flock":      {unix.EINTR, unix.EAGAIN, unix.ENOLCK},
	"newfstatat": {unix.EACCES, unix.EIO},
	"statx":      {unix.EACCES, unix.EIO},
	"fstat":      {unix.EIO},
	"getdents64": {unix.EIO},
}

// faultTraced is what a dry run traces: every call the operations make on
// their files.
var faultTraced = []string{
	"openat", "read", "pread64", "write", "pwrite64", "ftruncate", "fchmod", "fsync", "fdatasync",
	"close", "renameat", "renameat2", "unlinkat", "flock", "newfstatat", "statx", "fstat", "getdents64",
	"mkdirat", "linkat",
}

// faultOp is one operation of the matrix, as the parent sees it.
type faultOp struct {
	name string
	// seed writes the cell's state before the helper starts: the state a
	// previous run acknowledged.
	seed func(t *testing.T, root string)
	// check judges the outcome while the helper lives.
	check func(t *testing.T, c *faultCase, o *faultOutcome)
	// after, when set, judges the directory once the helper is gone.
	after func(t *testing.T, c *faultCase, o *faultOutcome)
	smoke bool // in the default subset
	// refused says the operation's answer without a fault is a busy
	// refusal wrapping the context's error, not a success.
	refused bool
	// env, when set, is what the helper's environment adds (read when its
	// packages load, before its role runs).
	env func(root string) []string
	// plans, when set, makes what says, call by call in the dry run's
	// order, which calls cells are planned for: those it plans, up to the
	// first it stops at (a path whose rest depends on another process's
	// timing, such as Start's wait, is left out, so that every cell counts
	// to the same call).
	plans func() func(call straceCall) (plan, stop bool)
}

// faultCase is one cell: an operation, and the fault injected (none in a
// dry run).
type faultCase struct {
	op     *faultOp
	root   string
	class  string
	occ    string // first, middle, last
	errno  syscall.Errno
	target straceCall
}

func (c *faultCase) name() string {
	if c.errno == 0 {
		return c.op.name + "/dry"
	}
	return fmt.Sprintf("%s/%s#%d/%s", c.op.name, c.class, c.target.n, unix.ErrnoName(c.errno))
}

// eintr reports whether the cell injects an EINTR the library must retry.
func (c *faultCase) eintr() bool { return c.errno == unix.EINTR && c.class != "close" }

// faultOutcome is what the parent saw of one helper.
type faultOutcome struct {
	res   faultResult
	pid   int
	locks map[string]string // lock files (relative to root) the helper holds: "WRITE" or "READ"
}

// straceCall is one line of a trace: a call of the traced thread.
type straceCall struct {
	name     string // the system call
	class    string // what it is for the matrix: name, or openat(w), fsync(dir), close(lock)...
	n        int    // its number among the thread's calls of name, from 1
	path     string // the paths it touches, the cell's root written $D, temporary names normalised
	inDir    bool   // it touches the cell's directory
	injected bool
}

func TestFaultMatrix(t *testing.T) {
	straceBin, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (apt-get install strace): the fault-injection matrix needs it")
	}
	full := os.Getenv(envFaultMatrix) == "full"
	start := time.Now()
	m := &faultMatrix{strace: straceBin}

	// The dry runs: each operation once without a fault, traced whole. They
	// are cells too: with no fault every operation must succeed.
	var ops []*faultOp
	for _, op := range faultOps {
		if full || op.smoke {
			ops = append(ops, op)
		}
	}
	dry := make(map[string][]straceCall)
	var dryMu sync.Mutex
	probe := &faultCase{op: ops[0]}
	if ok, why := m.canAttach(t, probe); !ok {
		t.Skipf("strace cannot attach to a helper here (ptrace not permitted?): %s", why)
	}
	m.pool(t, len(ops), func(i int) {
		c := &faultCase{op: ops[i]}
		t.Run(c.name(), func(t *testing.T) {
			calls := m.cell(t, c)
			dryMu.Lock()
			dry[c.op.name] = calls
			dryMu.Unlock()
		})
	})

	var cells []*faultCase
	for _, op := range ops {
		cells = append(cells, planCells(op, dry[op.name], full)...)
	}
	m.pool(t, len(cells), func(i int) {
		c := cells[i]
		t.Run(c.name(), func(t *testing.T) { m.cell(t, c) })
	})

	syscalls, errnos, classes := map[string]bool{}, map[syscall.Errno]bool{}, map[string]bool{}
	for _, c := range cells {
		syscalls[c.target.name] = true
		errnos[c.errno] = true
		classes[c.class] = true
	}
	t.Logf("fault matrix figures: cells=%d passed=%d failed=%d (plus %d dry runs) ops=%d syscalls=%d classes=%d errnos=%d temps_left=%d removed_by_next_writer=%d elapsed=%v full=%t",
		m.tried.Load(), m.passed.Load(), m.tried.Load()-m.passed.Load(), len(ops), len(ops), len(syscalls), len(classes), len(errnos),
		m.temps.Load(), m.cleaned.Load(), time.Since(start).Round(time.Second), full)
	if !full {
		t.Logf("a smoke subset; %s=full runs every cell", envFaultMatrix)
	}
}

// planCells plans the cells of op from its dry run: for each class of call
// that touches the cell's directory and has errors to try, the first, a
// middle and the last occurrence, each with every error of the class. The
// smoke subset takes the first occurrence and the first error only.
func planCells(op *faultOp, calls []straceCall, full bool) []*faultCase {
	byClass := map[string][]straceCall{}
	var order []string
	var plans func(call straceCall) (plan, stop bool)
	if op.plans != nil {
		plans = op.plans()
	}
	for _, call := range calls {
		if plans != nil {
			plan, stop := plans(call)
			if stop {
				break
			}
			if !plan {
				continue
			}
		}
		if !call.inDir || faultErrnos[call.class] == nil {
			continue
		}
		if byClass[call.class] == nil {
			order = append(order, call.class)
		}
		byClass[call.class] = append(byClass[call.class], call)
	}
	var cells []*faultCase
	for _, class := range order {
		list := byClass[class]
		picks := []int{0, len(list) / 2, len(list) - 1}
		errnos := faultErrnos[class]
		if !full {
			picks, errnos = picks[:1], errnos[:1]
		}
		seen := map[int]bool{}
		for _, i := range picks {
			if seen[i] {
				continue
			}
			seen[i] = true
			occ := "middle"
			switch i {
			case 0:
				occ = "first"
			case len(list) - 1:
				occ = "last"
			}
			for _, e := range errnos {
				cells = append(cells, &faultCase{op: op, class: class, occ: occ, errno: e, target: list[i]})
			}
		}
	}
	return cells
}

// faultMatrix runs cells and keeps the figures.
type faultMatrix struct {
	strace         string
	tried, passed  atomic.Int64
	temps, cleaned atomic.Int64
}

// pool runs fn(0..n-1) on a few goroutines: cells are mostly waiting on
// processes, so a little more than one per core keeps both cores busy.
func (m *faultMatrix) pool(t *testing.T, n int, fn func(i int)) {
	workers := 2 * runtime.GOMAXPROCS(0)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// canAttach starts one helper and attaches strace to it, to tell a machine
// where ptrace is not permitted (a skip) from a failing cell.
func (m *faultMatrix) canAttach(t *testing.T, c *faultCase) (bool, string) {
	root := t.TempDir()
	c.op.seed(t, root)
	h := startFaultHelper(t, c.op, root)
	defer h.Kill()
	tid, _, _ := strings.Cut(h.Expect("ready"), " ")
	s, err := m.attach(t, tid, filepath.Join(t.TempDir(), "probe.log"), []string{"-e", "trace=none"})
	if err != nil {
		return false, err.Error()
	}
	h.Kill()
	s.wait()
	return true, ""
}

// startFaultHelper starts the fault helper for op in root.
func startFaultHelper(t *testing.T, op *faultOp, root string) *child {
	cmd := testharness.Command(root)
	cmd.Env = append(os.Environ(), envFaultOp+"="+op.name)
	if op.env != nil {
		cmd.Env = append(cmd.Env, op.env(root)...)
	}
	return startChildCmd(t, cmd, "fault")
}

// cell runs one cell: seed, helper, strace, the operation, the checks. It
// returns the trace (a dry run's is the plan of its operation's cells).
func (m *faultMatrix) cell(t *testing.T, c *faultCase) []straceCall {
	m.tried.Add(1)
	t.Cleanup(func() {
		if !t.Failed() && !t.Skipped() {
			m.passed.Add(1)
		}
	})
	c.root = t.TempDir()
	c.op.seed(t, c.root)
	h := startFaultHelper(t, c.op, c.root)
	deadline := time.AfterFunc(faultDeadline, h.Kill) // a hang fails the cell, never the run
	defer deadline.Stop()
	tid, tag, _ := strings.Cut(h.Expect("ready"), " ")

	args := []string{"-e", "trace=" + strings.Join(faultTraced, ",")}
	if c.errno != 0 {
		name := c.target.name
		args = []string{"-e", "trace=" + name, "-e", fmt.Sprintf("inject=%s:error=%s:when=%d", name, unix.ErrnoName(c.errno), c.target.n)}
	}
	for _, p := range faultPaths(c.root, tag) {
		args = append(args, "-P", p)
	}
	logPath := filepath.Join(t.TempDir(), "strace.log")
	s, err := m.attach(t, tid, logPath, args)
	require.NoError(t, err, "strace")
	h.Send("go")
	o := &faultOutcome{pid: h.PID()}
	require.NoError(t, json.Unmarshal([]byte(h.Expect("done")), &o.res))
	o.locks = heldLocks(t, o.pid, c.root)

	// While the helper lives: the outcome and its locks.
	checkFaultOutcome(t, c, o)

	require.NoError(t, h.Stop(), "the helper exits")
	if c.op.after != nil {
		c.op.after(t, c, o)
	}
	s.wait()
	calls, err := parseStrace(logPath, c.root)
	require.NoError(t, err)
	if c.errno != 0 {
		checkInjected(t, c, calls)
	}
	// After it is gone: a temporary file it left is the next writer's to
	// remove.
	m.nextWriter(t, c.root)
	return calls
}

// dirFileNames are the names of dirFiles's single files of the given kinds
// (every kind when none is given), in the table's order.
func dirFileNames(kinds ...dirFileKind) []string {
	var names []string
	for _, f := range dirFiles {
		if !f.family() && (len(kinds) == 0 || slices.Contains(kinds, f.kind)) {
			names = append(names, f.name)
		}
	}
	return names
}

// faultPaths are every path an operation of the matrix may touch in root,
// for strace's -P: the directories, the files of dirFiles and the matrix's
// own, and the temporary files the helper whose writer tag is tag may make.
func faultPaths(root, tag string) []string {
	names := append(dirFileNames(), faultStateFile, faultJournal, faultOldName, faultNewName)
	written := append(dirFileNames(kindState), faultStateFile, faultJournal)
	for _, f := range dirFiles {
		if f.kind == kindSetAside {
			for _, of := range f.of {
				names = append(names, of+corruptSuffix)
			}
		}
	}
	var paths []string
	for _, dir := range []string{root, scopeDirOf(root), dataDirOf(root)} {
		paths = append(paths, dir)
		for _, name := range names {
			paths = append(paths, filepath.Join(dir, name))
		}
		for _, name := range written {
			for n := 1; n <= faultTemps; n++ {
				paths = append(paths, filepath.Join(dir, durable.TempPrefix(name)+tag+"-"+faultTempName(n)))
			}
		}
	}
	return paths
}

// straceRun is a strace attached to one thread.
type straceRun struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// attach starts strace on the thread tid with args, its trace going to
// logPath, and returns once strace says it is attached.
func (m *faultMatrix) attach(t *testing.T, tid, logPath string, args []string) (*straceRun, error) {
	full := append([]string{"-y", "-e", "signal=none"}, args...)
	full = append(full, "-o", logPath, "-p", tid)
	cmd := exec.Command(m.strace, full...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &straceRun{cmd: cmd, done: make(chan struct{})}
	attached := make(chan string, 1) // "" once attached, else what strace said before it exited
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		var said []string
		told := false
		for sc.Scan() {
			line := sc.Text()
			if !told && strings.Contains(line, "attached") {
				attached <- ""
				told = true
				continue
			}
			said = append(said, line)
		}
		if !told {
			attached <- strings.Join(said, "; ")
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-s.done
	})
	select {
	case why := <-attached:
		if why != "" {
			return nil, fmt.Errorf("strace did not attach: %s", why)
		}
		return s, nil
	case <-time.After(testharness.Wait):
		cmd.Process.Kill()
		return nil, fmt.Errorf("strace did not attach within %v", testharness.Wait)
	}
}

// wait waits for strace to end: it does once its thread has gone. A strace
// that outstays the bound is killed.
func (s *straceRun) wait() {
	select {
	case <-s.done:
	case <-time.After(testharness.Wait):
		s.cmd.Process.Kill()
		<-s.done
	}
}

var (
	straceLineRE = regexp.MustCompile(`^([a-z0-9_]+)\((.*)\)\s+=\s+(.*)$`)
	quotedRE     = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	fdPathRE     = regexp.MustCompile(`^-?\d+<([^>]*)>`)
	tempNameRE   = regexp.MustCompile(`\.tmp-[0-9]+-[0-9]+-[0-9a-f]+-[0-9a-f]+`)
)

// pathCalls take paths as arguments; the others a descriptor first.
var pathCalls = map[string]bool{"openat": true, "renameat": true, "renameat2": true, "unlinkat": true,
	"newfstatat": true, "statx": true, "mkdirat": true, "linkat": true}

// lockFiles are the names of the lock files, whose close the matrix leaves
// out (see envFaultMatrix).
var lockFiles = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range dirFileNames(kindLock) {
		m[name] = true
	}
	return m
}()

// parseStrace reads the trace of one thread.
func parseStrace(logPath, root string) ([]straceCall, error) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	var calls []straceCall
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		m := straceLineRE.FindStringSubmatch(line)
		if m == nil {
			continue // "+++ exited with 0 +++" and the like
		}
		name, args, ret := m[1], m[2], m[3]
		counts[name]++
		call := straceCall{name: name, class: name, n: counts[name], injected: strings.Contains(ret, "(INJECTED)")}
		var paths []string
		if name == "statx" && strings.Contains(args, "AT_EMPTY_PATH") {
			// statx(fd, "", AT_EMPTY_PATH): a stat of the descriptor.
			if fm := fdPathRE.FindStringSubmatch(args); fm != nil {
				paths = append(paths, fm[1])
			}
		} else if pathCalls[name] {
			for _, q := range quotedRE.FindAllStringSubmatch(args, -1) {
				paths = append(paths, q[1])
			}
		} else if fm := fdPathRE.FindStringSubmatch(args); fm != nil {
			paths = append(paths, fm[1])
		}
		var norm []string
		for _, p := range paths {
			if p == root || strings.HasPrefix(p, root+"/") {
				call.inDir = true
			}
			norm = append(norm, tempNameRE.ReplaceAllString(strings.ReplaceAll(p, root, "$D"), ".tmp-*"))
		}
		call.path = strings.Join(norm, " -> ")
		switch name {
		case "openat":
			call.class = "openat(r)"
			if strings.Contains(args, "O_WRONLY") || strings.Contains(args, "O_RDWR") || strings.Contains(args, "O_CREAT") {
				call.class = "openat(w)"
			}
		case "fsync", "fdatasync":
			if len(paths) == 1 {
				if fi, err := os.Stat(paths[0]); err == nil && fi.IsDir() {
					call.class = "fsync(dir)"
				}
			}
		case "close":
			if len(paths) == 1 && lockFiles[filepath.Base(paths[0])] {
				call.class = "close(lock)"
			}
		}
		calls = append(calls, call)
	}
	return calls, nil
}

// checkInjected checks that the cell's injection landed on the call planned
// from the dry run: the same number of its name, on the same path.
func checkInjected(t *testing.T, c *faultCase, calls []straceCall) {
	t.Helper()
	var hit []straceCall
	for _, call := range calls {
		if call.injected {
			hit = append(hit, call)
		}
	}
	if assert.Len(t, hit, 1, "exactly one call injected (planned: %s #%d on %s)", c.target.name, c.target.n, c.target.path) {
		assert.Equal(t, c.target.n, hit[0].n, "the injection hit the planned call")
		assert.Equal(t, c.target.path, hit[0].path, "the injection hit the planned path")
	}
}

// heldLocks lists the flock(2) locks pid holds on files in root (and one
// level below), from its /proc/<pid>/fdinfo: the test's own reading.
func heldLocks(t *testing.T, pid int, root string) map[string]string {
	t.Helper()
	byIno := map[string]string{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			rel, _ := filepath.Rel(root, p)
			byIno[fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)] = rel
		}
		return nil
	})
	flocks, err := fdinfoFlocks(pid)
	require.NoError(t, err, "the helper's fdinfo")
	locks := map[string]string{}
	for _, l := range flocks {
		if rel, ok := byIno[l.file]; ok {
			locks[rel] = l.access
		}
	}
	return locks
}

// nextWriter checks that no temporary file is left in the cell, or that
// the next writer of its name removes it once the helper is gone.
func (m *faultMatrix) nextWriter(t *testing.T, root string) {
	t.Helper()
	for _, dir := range []string{root, scopeDirOf(root)} {
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		temps := tempFiles(t, dir)
		if len(temps) == 0 {
			continue
		}
		m.temps.Add(int64(len(temps)))
		names := map[string]bool{}
		for _, tmp := range temps {
			base := filepath.Base(tmp)
			names[base[1:strings.Index(base, ".tmp-")]] = true
		}
		for name := range names {
			data, _ := os.ReadFile(filepath.Join(dir, name))
			require.NoError(t, durable.Write(dir, name, data), "the next writer of %s", name)
		}
		left := tempFiles(t, dir)
		assert.Empty(t, left, "the next writer removes the temporary files a gone writer left")
		m.cleaned.Add(int64(len(temps) - len(left)))
	}
}

// checkFaultOutcome makes the checks every cell shares, then the
// operation's own.
func checkFaultOutcome(t *testing.T, c *faultCase, o *faultOutcome) {
	t.Helper()
	require.Empty(t, o.res.Panic, "no panic")
	switch {
	case c.errno == 0 && c.op.refused:
		assert.True(t, o.res.Busy && o.res.Ctx, "with no fault the operation is refused as busy: %s", o.res.Err)
	case c.errno == 0:
		assert.Empty(t, o.res.Err, "with no fault the operation succeeds")
	case c.eintr() && c.op.refused:
		assert.True(t, o.res.Busy && o.res.Ctx, "an EINTR is retried: %s", o.res.Err)
	case c.eintr():
		assert.Empty(t, o.res.Err, "an EINTR is retried")
	}
	if o.res.Err != "" {
		assert.True(t, strings.Contains(o.res.Err, c.root), "the error names the path: %s", o.res.Err)
		hint := advice.For(syscall.Errno(o.res.ErrnoNum))
		if o.res.Unsupported {
			hint = "to a local disk" // ErrLockingUnsupported says where to move it
		}
		if o.res.Errno != "" && hint != "" {
			assert.True(t, strings.Contains(o.res.Err, hint), "the error says what to do: %s", o.res.Err)
		}
	}
	_, stateHeld := o.locks[stateLockName]
	assert.False(t, stateHeld, "the state lock is never left held")
	c.op.check(t, c, o)
}

func isNotDurable(err error) bool { return errors.Is(err, ErrNotDurable) }

// The operations.

// faultDead is an identity of a process that is provably gone: this test
// process's pid with other start ticks (a "recycled" pid, verdict Stale).
func faultDead() Identity {
	id := Self()
	id.StartTicks++
	id.Instance = strings.Repeat("d", 32)
	return id
}

func writeJSONFile(t *testing.T, path string, v any, perm os.FileMode) {
	t.Helper()
	line, err := jsonLine(v)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, line, perm))
	require.NoError(t, os.Chmod(path, perm))
}

func writeLinesFile(t *testing.T, path string, lines ...string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
}

// readLinesFile reads a state file of lines; nil when absent.
func readLinesFile(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return splitLines(data)
}

// seedPrevious leaves what a previous runner killed with SIGKILL leaves: its
// identity in runner.lock (made 0644 by hand, so the next holder makes it
// private), its record, a restart request addressed to it, a dead starter in
// the gate, and a state file the next runner must keep.
func seedPrevious(t *testing.T, root string) {
	dead := faultDead()
	// A runner killed with -9 leaves its line in both lock files; one
	// longer than the next holder's, so that writing over it cuts a tail.
	left := dead
	left.Hostname = strings.Repeat("h", 200)
	writeJSONFile(t, filepath.Join(root, LockName), lockContent{Identity: left, FD: 3}, 0o644)
	writeJSONFile(t, filepath.Join(root, treeLockName), lockContent{Identity: left, FD: 4}, 0o600)
	writeJSONFile(t, filepath.Join(root, RecordName), Record{PID: dead.PID, Process: dead, Specs: []string{"stale"}}, 0o644)
	writeJSONFile(t, filepath.Join(root, RestartName), restartRequest{Mode: RestartNow, RequestedAt: time.Now().Add(-time.Hour), By: dead, For: dead.Instance}, 0o644)
	writeJSONFile(t, filepath.Join(root, gateName), gateState{Seq: 5, Admitted: 4, Waiting: []gateEntry{{Seq: 5, Starter: liveness.Identity(dead), Since: time.Now().Add(-time.Hour)}}}, 0o644)
	writeLinesFile(t, filepath.Join(root, faultStateFile), "keep 1", "keep 2")
}

// seedNothing is the seed of operations whose helper sets up what they need.
func seedNothing(t *testing.T, root string) {
	writeLinesFile(t, filepath.Join(root, faultStateFile), "keep 1", "keep 2")
}

// expectLocks checks the helper holds exactly want.
func expectLocks(t *testing.T, o *faultOutcome, want map[string]string) {
	t.Helper()
	if want == nil {
		want = map[string]string{}
	}
	assert.Equal(t, want, o.locks, "the locks the helper holds")
}

var holdsDir = map[string]string{LockName: "WRITE", treeLockName: "WRITE"}

// checkKept checks the state file the seed wrote is intact.
func checkKept(t *testing.T, root string) {
	t.Helper()
	assert.Equal(t, []string{"keep 1", "keep 2"}, readLinesFile(t, filepath.Join(root, faultStateFile)), "acknowledged state is kept")
}

// checkAdmission is the check of an operation that takes the directory.
func checkAdmission(t *testing.T, c *faultCase, o *faultOutcome, published bool) {
	t.Helper()
	checkKept(t, c.root)
	rec, running, err := Running(c.root)
	assert.NoError(t, err)
	if o.res.Err == "" {
		expectLocks(t, o, holdsDir)
		assert.True(t, o.res.Holds, "an admitted runner knows it holds the directory")
		assert.True(t, running, "the directory is held")
		assert.Equal(t, o.pid, rec.PID, "and named as the helper's")
		if published {
			r, state, _ := readRecord(c.root)
			assert.Equal(t, fileOK, state)
			assert.Equal(t, o.pid, r.PID, "the admitted runner's record is published")
		}
		return
	}
	expectLocks(t, o, nil)
	assert.False(t, o.res.Holds, "a refused runner does not believe it holds the directory")
	assert.False(t, running, "a refused runner leaves the directory free")
	for _, name := range []string{RecordName, RestartName, gateName} {
		assertNotTorn(t, filepath.Join(c.root, name))
	}
}

// assertNotTorn checks a JSON state file is absent or parses whole.
func assertNotTorn(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return
	}
	require.NoError(t, err)
	var v map[string]any
	assert.NoError(t, durable.DecodeObject(data, &v), "%s is whole", path)
}

func readRestartFile(t *testing.T, root string) (string, bool) {
	t.Helper()
	assertNotTorn(t, filepath.Join(root, RestartName))
	req, ok := readRestart(root)
	return req.Mode, ok
}

// checkWithdrawn checks that a starter that gave up left the gate, or, when
// gate.json could not be written, said so: then its entry stays while its
// process lives (see Takeover).
func checkWithdrawn(t *testing.T, c *faultCase, o *faultOutcome) {
	t.Helper()
	g, _ := readGate(c.root)
	for _, e := range g.Waiting {
		if e.Starter.PID == o.pid {
			assert.Contains(t, o.res.Log, "could not withdraw from the gate", "a starter that gave up left the gate, or says why not")
		}
	}
}

// checkGateAfter checks that no starter waits in the gate once the helper
// is gone, whatever it could write.
func checkGateAfter(t *testing.T, c *faultCase, o *faultOutcome) {
	t.Helper()
	st, err := Status(c.root)
	require.NoError(t, err)
	for _, id := range st.Waiting {
		assert.NotEqual(t, o.pid, id.PID, "a gone starter never counts as waiting")
	}
}

var faultOps = []*faultOp{
	{name: "acquire", smoke: true, seed: seedPrevious, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		checkAdmission(t, c, o, false)
	}},
	{name: "takeover", seed: seedPrevious, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		checkAdmission(t, c, o, true)
		if o.res.Err != "" {
			checkWithdrawn(t, c, o)
		}
	}, after: checkGateAfter},
	{name: "gate", refused: true,
		seed: func(t *testing.T, root string) {
			seedNothing(t, root)
			release, err := Acquire(root) // the live runner: this test process
			require.NoError(t, err)
			t.Cleanup(release)
		},
		check: func(t *testing.T, c *faultCase, o *faultOutcome) {
			expectLocks(t, o, nil)
			assert.False(t, o.res.Holds)
			assert.NotEmpty(t, o.res.Err, "never admitted beside the live runner")
			checkWithdrawn(t, c, o)
			_, ok := readRestartFile(t, c.root)
			assert.False(t, ok, "an ended context asks nothing")
			checkKept(t, c.root)
		}, after: checkGateAfter},
	{name: "publish", smoke: true, seed: seedNothing, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, holdsDir)
		assert.True(t, o.res.Holds, "a failed Publish leaves the hold in place")
		if o.res.Err != "" && !o.res.NotDurable {
			assert.Contains(t, o.res.Err, "this process still holds "+c.root, "a failed Publish says the hold stands")
		}
		assertNotTorn(t, filepath.Join(c.root, RecordName))
		rec, state, _ := readRecord(c.root)
		assert.Equal(t, fileOK, state, "the record acknowledged before is never dropped")
		want := "v1"
		if o.res.Err == "" || o.res.NotDurable {
			want = "v2"
		}
		assert.Equal(t, []string{want}, rec.Specs)
		checkKept(t, c.root)
	}},
	{name: "release", smoke: true, seed: seedNothing, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		assert.False(t, o.res.Holds, "a released runner knows it holds nothing")
		_, running, err := Running(c.root)
		assert.NoError(t, err)
		assert.False(t, running)
		assertNotTorn(t, filepath.Join(c.root, RecordName))
		checkKept(t, c.root)
	}},
	{name: "request", seed: func(t *testing.T, root string) {
		seedNothing(t, root)
		writeJSONFile(t, filepath.Join(root, RestartName), restartRequest{Mode: RestartDrain, RequestedAt: time.Now(), By: Self()}, 0o644)
	}, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		mode, ok := readRestartFile(t, c.root)
		assert.True(t, ok, "the pending request is never dropped")
		want := RestartDrain
		if o.res.Err == "" || o.res.NotDurable {
			want = RestartNow
		}
		assert.Equal(t, want, mode)
	}},
	{name: "request-weaker", seed: func(t *testing.T, root string) {
		seedNothing(t, root)
		writeJSONFile(t, filepath.Join(root, RestartName), restartRequest{Mode: RestartNow, RequestedAt: time.Now(), By: Self()}, 0o644)
	}, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		mode, ok := readRestartFile(t, c.root)
		assert.True(t, ok, "the pending request is never dropped")
		assert.Equal(t, RestartNow, mode, "a request never weakens a pending one")
	}},
	{name: "clearrestart", seed: func(t *testing.T, root string) {
		seedNothing(t, root)
		writeJSONFile(t, filepath.Join(root, RestartName), restartRequest{Mode: RestartNow, RequestedAt: time.Now(), By: Self()}, 0o644)
	}, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		_, ok := readRestartFile(t, c.root)
		assert.Equal(t, o.res.Err != "" && !o.res.NotDurable, ok, "cleared exactly when it says so")
	}},
	{name: "clearstale", seed: func(t *testing.T, root string) {
		seedPrevious(t, root)
		require.NoError(t, os.Chmod(filepath.Join(root, LockName), 0o600))
	}, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		checkKept(t, c.root)
		for _, name := range []string{RecordName, RestartName} {
			assertNotTorn(t, filepath.Join(c.root, name))
		}
		if o.res.Err == "" {
			assert.Equal(t, faultDead().PID, o.res.PID, "the stale pid")
			assert.NoFileExists(t, filepath.Join(c.root, RecordName), "a nil error means the stale record is gone")
			data, _ := os.ReadFile(filepath.Join(c.root, LockName))
			assert.Empty(t, data, "and the lock file names nobody")
			assert.NoFileExists(t, filepath.Join(c.root, RestartName), "and the request addressed to the dead runner is gone")
		}
	}},
	{name: "save", smoke: true, seed: func(t *testing.T, root string) {
		writeLinesFile(t, filepath.Join(root, faultStateFile), "old 1", "old 2")
	}, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		want := []string{"old 1", "old 2"}
		if o.res.Err == "" || o.res.NotDurable {
			want = []string{"new 1", "new 2", "new 3"}
		}
		assert.Equal(t, want, readLinesFile(t, filepath.Join(c.root, faultStateFile)))
	}},
	{name: "append", seed: func(t *testing.T, root string) {
		writeLinesFile(t, filepath.Join(root, faultJournal), "a", "b")
	}, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		want := []string{"a", "b"}
		if o.res.Err == "" || o.res.NotDurable {
			want = []string{"a", "b", "c"}
		}
		assert.Equal(t, want, readLinesFile(t, filepath.Join(c.root, faultJournal)))
	}},
	{name: "migrate", seed: func(t *testing.T, root string) {
		writeLinesFile(t, filepath.Join(root, faultOldName), "payload")
	}, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		oldL, newL := readLinesFile(t, filepath.Join(c.root, faultOldName)), readLinesFile(t, filepath.Join(c.root, faultNewName))
		if o.res.Err == "" || o.res.NotDurable {
			assert.Nil(t, oldL)
			assert.Equal(t, []string{"payload"}, newL)
		} else {
			assert.Equal(t, []string{"payload"}, oldL, "a failed migration keeps the old file")
			assert.Nil(t, newL)
		}
	}},
	{name: "migrate-exists", seed: func(t *testing.T, root string) {
		writeLinesFile(t, filepath.Join(root, faultOldName), "old")
		writeLinesFile(t, filepath.Join(root, faultNewName), "winner")
	}, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		oldL, newL := readLinesFile(t, filepath.Join(c.root, faultOldName)), readLinesFile(t, filepath.Join(c.root, faultNewName))
		assert.Equal(t, []string{"winner"}, newL, "an existing new name wins")
		if o.res.Err == "" || o.res.NotDurable {
			assert.Nil(t, oldL)
		} else {
			assert.Equal(t, []string{"old"}, oldL)
		}
	}},
	{name: "scope", seed: func(t *testing.T, root string) {
		dead := faultDead()
		left := dead
		left.Hostname = strings.Repeat("h", 200) // a longer line than the next holder's, as above
		writeJSONFile(t, filepath.Join(scopeDirOf(root), scopeLockName), lockContent{Identity: left, FD: 3}, 0o644)
		writeJSONFile(t, filepath.Join(scopeDirOf(root), scopeOwnerName), ScopeOwner{DataDir: "/elsewhere", PID: dead.PID, Process: dead}, 0o644)
	}, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		path := filepath.Join(scopeDirOf(c.root), scopeOwnerName)
		assertNotTorn(t, path)
		owner, ok := ReadScopeOwner(scopeDirOf(c.root))
		if o.res.Err == "" {
			expectLocks(t, o, map[string]string{"scope/" + scopeLockName: "WRITE"})
			assert.True(t, ok)
			assert.Equal(t, o.pid, owner.PID, "the holder's owner record")
			return
		}
		expectLocks(t, o, nil)
	}},
	{name: "scope-release", seed: seedNothing, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		expectLocks(t, o, nil)
		assertNotTorn(t, filepath.Join(scopeDirOf(c.root), scopeOwnerName))
	}},
	{name: "sync", seed: seedNothing, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		if o.res.Err != "" {
			expectLocks(t, o, nil)
			return
		}
		if len(o.locks) == 0 {
			assert.Contains(t, o.res.Log, "runs unmarked", "an unmarked sync says so")
			return
		}
		expectLocks(t, o, map[string]string{syncLockName: "READ"})
	}},
	{name: "reset", seed: seedNothing, check: func(t *testing.T, c *faultCase, o *faultOutcome) {
		if o.res.Err == "" {
			expectLocks(t, o, map[string]string{syncLockName: "WRITE"})
			return
		}
		expectLocks(t, o, nil)
		rootErr := strings.Contains(o.res.Err, " "+c.root+":") // the data root itself cannot be made or read
		assert.True(t, o.res.SyncUnknown || o.res.SyncRunning || rootErr, "a refused reset says why: %s", o.res.Err)
	}},
}
