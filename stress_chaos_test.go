//go:build linux

package runnerstate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The chaos test: for a bounded time, a dozen slots keep starting processes
// that each Takeover one directory once and, when admitted, run a job; a
// killer sends SIGKILL or SIGTERM to random ones at random instants and now
// and then asks for a restart. Everything that matters is written, in the
// order it happened, to one O_APPEND witness log: every admitted runner's
// start, ticks and end (written while it holds the lock), every signal a
// starter sends (written by liveness's signal hook just before the signal,
// with what the kernel says about the target at that instant), and every
// signal the killer sends.
//
// From the log the test proves:
//
//   - No overlap: once a runner writes "start", no earlier runner writes
//     anything again, and the kernel lists the new runner as the only
//     exclusive holder of runner.lock when it starts.
//   - Newest starter: admissions come in the order starters registered in the
//     takeover gate (an older starter is never admitted after a newer one),
//     and a starter that returns ErrSuperseded had a newer one registered.
//   - Signals: every signal a starter sends goes to a process that is the
//     kernel's lock holder at that instant, or that had been the runner and
//     was letting go (counted and logged, with how long after its end line
//     it came: see TestTakeoverNeverSignalsAfterRelease); never to a starter
//     still waiting: no waiting starter gets a SIGTERM the killer did not
//     send, and no process is signalled before it becomes the runner.
//   - Status agrees with the kernel: sampled during the run whenever the
//     kernel's holder did not change around the call, and at the end.
//   - No hang: every Takeover returns within 5 s of its context's end, and
//     every process exits within its bound.
//
// RUNNERSTATE_CHAOS sets the duration (default 20s, 5s with -short), e.g.
// RUNNERSTATE_CHAOS=5m for a soak; RUNNERSTATE_CHAOS_ADMISSIONS ends the run
// as soon as that many starters have been admitted (the duration then bounds
// it); RUNNERSTATE_CHAOS_STARTERS the number of
// slots (default 12). The figures are logged: go test -race -run '^TestChaos$' -v .

// Environment of the chaos-starter role.
const (
	envWitness = "RUNNERSTATE_TEST_WITNESS" // the witness log
	envJob     = "RUNNERSTATE_TEST_JOB"     // how long a job runs
)

// Chaos settings.
const (
	chaosGrace     = 150 * time.Millisecond
	chaosKillAfter = 150 * time.Millisecond
	chaosWait      = 5 * time.Second // a starter's context
	chaosTick      = 3 * time.Millisecond
	// chaosExitBound is how long a chaos process may live at most: its
	// context, its longest job, and a generous margin for a loaded machine.
	chaosExitBound = chaosWait + 20*time.Second
)

// witnessLine appends one line to the witness log with a single write, so
// lines from many processes never interleave: "<unix ns> <process> <kind>
// <args>", where a process is "<pid>:<start ticks>" (procKey): a long run
// starts more processes than pid_max, so a pid alone names several.
func witnessLine(f *os.File, kind string, args ...any) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %s %s", time.Now().UnixNano(), selfKey(), kind)
	for _, a := range args {
		fmt.Fprintf(&b, " %v", a)
	}
	b.WriteByte('\n')
	f.Write(b.Bytes())
}

// procKey names a live process by identity, "<pid>:<start ticks>", so that
// two processes that had the same pid are never confused. A process that is
// gone by the time it is looked up is "<pid>:gone".
func procKey(pid int) string {
	id, err := liveness.Lookup(pid)
	if err != nil {
		return strconv.Itoa(pid) + ":gone"
	}
	return strconv.Itoa(pid) + ":" + strconv.FormatUint(id.StartTicks, 10)
}

var selfKey = sync.OnceValue(func() string { return procKey(os.Getpid()) })

// keyPID is the pid of a procKey.
func keyPID(key string) int {
	pid, _, _ := strings.Cut(key, ":")
	n, _ := strconv.Atoi(pid)
	return n
}

// holdsFlock reports whether the process pid holds an exclusive flock on the
// file at path, from the "lock:" lines of its /proc/<pid>/fdinfo/<fd>: an
// exact reading of one process, where /proc/locks is read a page at a time
// and can miss an entry while other locks come and go. It is the test's own
// reading, independent of the package's.
func holdsFlock(pid int, path string) bool {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	locks, err := fdinfoFlocks(pid)
	if err != nil {
		return false
	}
	for _, l := range locks {
		if l.access == "WRITE" && l.file == want {
			return true
		}
	}
	return false
}

// fdinfoFlock is one flock(2) lock a process holds, from a "lock:" line of
// its /proc/<pid>/fdinfo/<fd>:
//
//	lock:	1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF
type fdinfoFlock struct {
	access string // "WRITE" (exclusive) or "READ" (shared)
	file   string // "major:minor:inode", in hex, hex, decimal
}

// fdinfoFlocks lists the flock locks the process pid holds, from the fdinfo
// of each of its descriptors (one that closes while it is read is passed
// over). The error is reading the fdinfo directory's.
func fdinfoFlocks(pid int) ([]fdinfoFlock, error) {
	fdinfo := "/proc/" + strconv.Itoa(pid) + "/fdinfo"
	entries, err := os.ReadDir(fdinfo)
	if err != nil {
		return nil, err
	}
	var locks []fdinfoFlock
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(fdinfo, e.Name()))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(data)) {
			rest, ok := strings.CutPrefix(line, "lock:")
			if !ok {
				continue
			}
			if f := strings.Fields(rest); len(f) >= 6 && f[1] == "FLOCK" {
				locks = append(locks, fdinfoFlock{access: f[3], file: f[5]})
			}
		}
	}
	return locks, nil
}

// kernelFlockHolders lists the pids the kernel names as holding an exclusive
// flock on path, read from /proc/locks by the file's device and inode. It is
// the test's own reading, independent of the package's; it may miss an entry
// under churn (see holdsFlock), so it is used only where nothing else runs.
func kernelFlockHolders(path string) ([]int, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, err
	}
	data, err := readProcLocksStable()
	if err != nil {
		return nil, err
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	var pids []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters have "->".
		if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" || f[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && !slicesContains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// kernelListsHolder reports whether /proc/locks lists any exclusive holder
// of path.
func kernelListsHolder(path string) bool {
	h, _ := kernelFlockHolders(path)
	return len(h) > 0
}

// chaosProcs is the live chaos processes, for the killer and the sampler. A
// pid is in it only until its process has exited and before it is reaped, so
// a pid the killer picks cannot have been reused.
type chaosProcs struct {
	mu   sync.Mutex
	pids map[int]*child
	keys map[int]string // procKey of each, taken while it lives
}

func (p *chaosProcs) add(c *child) {
	key := procKey(c.PID())
	p.mu.Lock()
	p.pids[c.PID()] = c
	p.keys[c.PID()] = key
	p.mu.Unlock()
}

// lockSnapshot is who holds dir's locks among the chaos processes (a worker
// is none of them), and whether /proc/locks lists any holder of either.
type lockSnapshot struct {
	runner, tree []int
	named        int // the pid tree.lock names
	listed       bool
}

func (p *chaosProcs) snapshot(dir string) lockSnapshot {
	lockPath, treePath := filepath.Join(dir, LockName), filepath.Join(dir, treeLockName)
	named := 0
	if data, err := os.ReadFile(treePath); err == nil {
		id, _ := parseLockContent(data)
		named = id.PID
	}
	return lockSnapshot{
		runner: p.holders(lockPath),
		tree:   p.holders(treePath),
		named:  named,
		listed: kernelListsHolder(lockPath) || kernelListsHolder(treePath),
	}
}

// holders lists the chaos processes that hold an exclusive flock on path,
// each read exactly from its fdinfo.
func (p *chaosProcs) holders(path string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pids []int
	for pid := range p.pids {
		if holdsFlock(pid, path) {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

func (p *chaosProcs) remove(c *child) {
	p.mu.Lock()
	delete(p.pids, c.PID())
	delete(p.keys, c.PID())
	p.mu.Unlock()
}

// signalRandom sends sig to a random live chaos process, writing the
// witness line first; with holder set, to the kernel's lock holder when it
// is one of them.
func (p *chaosProcs) signalRandom(rng *rand.Rand, w *os.File, sig syscall.Signal, lockPath string, holder bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pids) == 0 {
		return false
	}
	pids := make([]int, 0, len(p.pids))
	for pid := range p.pids {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	pid := pids[rng.IntN(len(pids))]
	if holder {
		for _, h := range pids {
			if holdsFlock(h, lockPath) {
				pid = h
				break
			}
		}
	}
	witnessLine(w, "killer", p.keys[pid], int(sig))
	p.pids[pid].Cmd.Process.Signal(sig)
	return true
}

func chaosDuration(t *testing.T) time.Duration {
	d := 20 * time.Second
	if testing.Short() {
		d = 5 * time.Second
	}
	if s := os.Getenv("RUNNERSTATE_CHAOS"); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		require.NoError(t, err, "RUNNERSTATE_CHAOS")
	}
	return d
}

func TestChaos(t *testing.T) {
	duration := chaosDuration(t)
	slots := 12
	if s := os.Getenv("RUNNERSTATE_CHAOS_STARTERS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "RUNNERSTATE_CHAOS_STARTERS")
		slots = n
	}
	wantAdmissions := 0
	if s := os.Getenv("RUNNERSTATE_CHAOS_ADMISSIONS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "RUNNERSTATE_CHAOS_ADMISSIONS")
		wantAdmissions = n
	}
	var admitted atomic.Int64
	seed := uint64(time.Now().UnixNano())
	t.Logf("chaos: %d slots for %v, seed %d", slots, duration, seed)
	dir := t.TempDir()
	witnessPath := filepath.Join(t.TempDir(), "witness.log")
	w, err := os.OpenFile(witnessPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer w.Close()
	captureLog(t)

	procs := &chaosProcs{pids: map[int]*child{}, keys: map[int]string{}}
	lockPath := filepath.Join(dir, LockName)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var problems struct {
		sync.Mutex
		list []string
	}
	problem := func(format string, args ...any) {
		problems.Lock()
		problems.list = append(problems.list, fmt.Sprintf(format, args...))
		problems.Unlock()
	}
	var spawned, statusSamples, statusChecked, statusTransient int
	var counts sync.Mutex

	for slot := range slots {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(slot)+1))
			time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
			for {
				select {
				case <-stop:
					return
				default:
				}
				behaviour := "obey"
				switch r := rng.IntN(100); {
				case r < 20:
					behaviour = "stubborn"
				case r < 32:
					behaviour = "deaf"
				}
				job := time.Duration(50+rng.IntN(1500)) * time.Millisecond
				cmd := testharness.Command(dir)
				cmd.Env = append(os.Environ(), envWitness+"="+witnessPath, envBehaviour+"="+behaviour, envJob+"="+job.String())
				if rng.IntN(10) < 3 {
					cmd.Env = append(cmd.Env, envWorker+"=1") // a runner with a worker in its tree
				}
				c := startChildCmd(t, cmd, "chaos-starter")
				procs.add(c)
				counts.Lock()
				spawned++
				counts.Unlock()
				bound := time.NewTimer(chaosExitBound)
				lines := c.Lines
				stopping := stop
			read:
				for {
					select {
					case line, ok := <-lines:
						if !ok {
							break read
						}
						if line == "admitted" {
							admitted.Add(1)
						} else {
							problem("chaos starter %d: %s", c.PID(), line)
						}
					case <-stopping:
						c.CloseStdin()
						stopping = nil
					case <-bound.C:
						problem("chaos process %d did not exit within %v", c.PID(), chaosExitBound)
						c.Kill()
					}
				}
				bound.Stop()
				procs.remove(c)
				err := c.Wait()
				// Killed (by the killer or a takeover) is fine; a non-zero
				// exit or any other signal is not.
				var ee *exec.ExitError
				if err != nil {
					ws, ok := syscall.WaitStatus(0), false
					if errors.As(err, &ee) {
						ws, ok = ee.Sys().(syscall.WaitStatus)
					}
					if !ok || !ws.Signaled() || (ws.Signal() != syscall.SIGKILL && ws.Signal() != syscall.SIGTERM) {
						problem("chaos process %d: %v", c.PID(), err)
					}
				}
				if stopping == nil {
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(rng.IntN(400)) * time.Millisecond):
				}
			}
		})
	}
	// The killer.
	var killerKills, killerTerms, killerRestarts, killerUnlinks int
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 0))
		nextRestart := time.Now().Add(time.Second)
		nextUnlink := time.Now().Add(time.Second)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(30+rng.IntN(220)) * time.Millisecond):
			}
			sig := syscall.SIGKILL
			if rng.IntN(10) < 3 {
				sig = syscall.SIGTERM
			}
			if procs.signalRandom(rng, w, sig, lockPath, rng.IntN(10) < 4) {
				if sig == syscall.SIGKILL {
					killerKills++
				} else {
					killerTerms++
				}
			}
			if time.Now().After(nextRestart) {
				mode := RestartDrain
				if rng.IntN(2) == 0 {
					mode = RestartNow
				}
				witnessLine(w, "killer-restart", mode)
				if err := RequestRestart(dir, mode); err != nil {
					problem("killer: RequestRestart: %v", err)
				}
				killerRestarts++
				nextRestart = time.Now().Add(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
			}
			if time.Now().After(nextUnlink) {
				// runner.lock lost under whoever holds it: its holder is
				// told, and no second runner starts beside it, for its
				// tree.lock says it still runs. (A tree.lock lost and then
				// its runner killed would leave orphans nobody can find: not
				// promised; TestLostLockFile covers tree.lock lost alone.)
				name := LockName
				witnessLine(w, "killer-unlink", name)
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) {
					problem("killer: unlink: %v", err)
				}
				killerUnlinks++
				nextUnlink = time.Now().Add(time.Duration(1000+rng.IntN(1500)) * time.Millisecond)
			}
		}
	})
	// The sampler: Status against the kernel, whenever the kernel's holder
	// is the same just before and just after the call.
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			// The kernel's holders, read exactly from each chaos process's
			// fdinfo just before and just after the call: the runner holds
			// tree.lock (with runner.lock, or alone once runner.lock was
			// unlinked under it); a starter taking the pair may hold a new
			// runner.lock for an instant while a lost runner or orphans
			// hold tree.lock. A process that is exiting still holds its
			// lock for a moment after its descriptors are gone from fdinfo,
			// so "no holder" also needs /proc/locks to list none.
			before := procs.snapshot(dir)
			st, err := Status(dir)
			after := procs.snapshot(dir)
			counts.Lock()
			statusSamples++
			counts.Unlock()
			if err != nil {
				problem("Status during chaos: %v", err)
				continue
			}
			if fmt.Sprint(before) != fmt.Sprint(after) || len(before.tree) > 1 || len(before.runner) > 1 {
				continue
			}
			counts.Lock()
			statusChecked++
			counts.Unlock()
			// The runner, settled: it holds tree.lock, which names it (it is
			// admitted, not still being admitted), and nobody else holds
			// runner.lock (a starter passing through, while runner.lock was
			// lost, is named by Status for that instant, unverified).
			runner := 0
			if len(before.tree) == 1 && before.named == before.tree[0] {
				runner = before.tree[0]
			}
			// runner.lock lost: a starter may take the new one for an instant.
			passing := (len(before.runner) == 0 || before.runner[0] != runner) && !st.Verified
			free := func(a, b lockSnapshot) bool {
				return len(a.runner)+len(a.tree)+len(b.runner)+len(b.tree) == 0 && !a.listed && !b.listed
			}
			switch {
			case free(before, after) && st.Held:
				// A starter may take the pair and let it go again within
				// the call (superseded while being admitted), unseen by
				// both snapshots: only an answer that stays wrong on a
				// second look is a problem.
				before2 := procs.snapshot(dir)
				st2, err := Status(dir)
				after2 := procs.snapshot(dir)
				if err == nil && free(before2, after2) && st2.Held {
					problem("Status says held by %d, twice in a row, while the kernel lists no holder", st2.Holder.PID)
				}
				counts.Lock()
				statusTransient++
				counts.Unlock()
			case runner != 0 && !st.Held:
				problem("Status says not held while pid %d holds the lock (%+v; %+v)", runner, before, st)
			case runner != 0 && st.Holder.PID != runner && !passing:
				problem("Status names pid %d while pid %d holds the lock (%+v; %+v)", st.Holder.PID, runner, before, st)
			case runner != 0 && st.Holder.Process.PID != 0 && st.Holder.Process.PID != runner:
				problem("Status reports the record of pid %d while pid %d holds the lock", st.Holder.Process.PID, runner)
			case st.Holder.Process.PID != 0 && !st.Verified:
				problem("Status reports the record of pid %d without verifying it", st.Holder.Process.PID)
			}
		}
	})

	// The run's length: the duration, or until enough admissions.
	began := time.Now()
	for tick := time.NewTicker(100 * time.Millisecond); time.Since(began) < duration; <-tick.C {
		if wantAdmissions > 0 && admitted.Load() >= int64(wantAdmissions) {
			tick.Stop()
			break
		}
	}
	t.Logf("chaos: ran %v", time.Since(began).Round(time.Second))
	close(stop)
	wg.Wait()

	// Quiet now: one last starter is admitted at once, and Status agrees
	// with the kernel while it runs and after it lets go.
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), envWitness+"="+witnessPath, envBehaviour+"=obey", envJob+"=1h")
	last := startChildCmd(t, cmd, "chaos-starter")
	last.Expect("admitted")
	holders, err := kernelFlockHolders(lockPath)
	require.NoError(t, err)
	st, err := Status(dir)
	require.NoError(t, err)
	assert.True(t, holdsFlock(last.PID(), lockPath), "the last starter holds the lock")
	assert.Equal(t, []int{last.PID()}, holders, "the kernel's holder")
	assert.True(t, st.Held)
	assert.True(t, st.Verified)
	assert.Equal(t, last.PID(), st.Holder.PID)
	assert.Equal(t, last.PID(), st.Holder.Process.PID)
	assert.Empty(t, st.Waiting, "no starter is left waiting")
	require.NoError(t, last.Stop())
	holders, err = kernelFlockHolders(lockPath)
	require.NoError(t, err)
	assert.Empty(t, holders)
	st, err = Status(dir)
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.Empty(t, st.Waiting)
	assert.NoFileExists(t, filepath.Join(dir, RecordName))

	require.NoError(t, w.Close())
	data, err := os.ReadFile(witnessPath)
	require.NoError(t, err)
	fig := analyseWitness(t, data)
	killWorkers(t, data)
	fig.spawned = spawned + 1
	fig.killerKills, fig.killerTerms, fig.killerRestarts, fig.killerUnlinks = killerKills, killerTerms, killerRestarts, killerUnlinks
	fig.statusSamples, fig.statusChecked, fig.statusTransient = statusSamples, statusChecked, statusTransient
	t.Log(fig.String())
	// A starter checks the kernel's holder right before it signals, so a
	// signal after a runner's end line went to a runner that still held the
	// lock: its release (record removal under the state lock) can take tens
	// of milliseconds under load after the end line. The end line is not the
	// release, so this is a figure; the deterministic regression test is
	// TestTakeoverNeverSignalsAfterRelease. Only a gap beyond any release
	// fails here.
	if fig.maxSignalAfterEnd > 0 {
		t.Logf("a starter signalled a runner %v after that runner's end line (it still held the lock at the starter's last look)", fig.maxSignalAfterEnd.Round(time.Millisecond))
	}
	if fig.maxSignalAfterEnd > 2*time.Second {
		t.Errorf("regression: a starter signalled a runner %v after that runner wrote its end line and let go (see TestTakeoverNeverSignalsAfterRelease)", fig.maxSignalAfterEnd.Round(time.Millisecond))
	}
	if fig.bareCtx > 0 {
		t.Errorf("regression: %d Takeover calls whose context ended returned the bare context error, not a *BusyError (see TestTakeoverContextEndIsBusy)", fig.bareCtx)
	}
	for _, p := range problems.list {
		t.Error(p)
	}
	if t.Failed() || os.Getenv("RUNNERSTATE_CHAOS_KEEP") != "" {
		keep := filepath.Join(os.TempDir(), fmt.Sprintf("runnerstate-chaos-witness-%d.log", seed))
		if os.WriteFile(keep, data, 0o644) == nil {
			t.Logf("witness log kept in %s", keep)
		}
	}
}

// killWorkers kills the chaos workers the witness log names that still run
// (none should: the last starter's Takeover stopped any orphan), by identity.
func killWorkers(t *testing.T, witness []byte) {
	for line := range strings.Lines(string(witness)) {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "ostart" {
			continue
		}
		pid := keyPID(f[1])
		if procKey(pid) == f[1] {
			t.Errorf("chaos worker %s still runs after the test", f[1])
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// chaosFigures are what a chaos run did.
type chaosFigures struct {
	spawned, calls, admissions, superseded, busy            int
	endJob, endRestart, endTerm, endStop, diedHolding       int
	takeovers                                               int
	libTerms, libKills, signalsToHolder, signalsLettingGo   int
	killerKills, killerTerms, killerRestarts, termsWaiting  int
	statusSamples, statusChecked, statusTransient           int
	maxHandoff, sumHandoff                                  time.Duration
	handoffs                                                int
	maxIdle                                                 time.Duration
	supersededChecked, bareCtx, maxHandoffLine              int
	maxSignalAfterEnd                                       time.Duration
	workers, orphans, orphanSignals, killerUnlinks, endLost int
}

func (f *chaosFigures) String() string {
	mean := time.Duration(0)
	if f.handoffs > 0 {
		mean = f.sumHandoff / time.Duration(f.handoffs)
	}
	return fmt.Sprintf("chaos figures: %d processes, %d Takeover calls: %d admissions, %d superseded (%d checked against the gate), %d busy; "+
		"runners ended: %d job done, %d on a restart request, %d on SIGTERM, %d at the end, %d killed while holding; "+
		"%d takeovers of a live runner; starters sent %d SIGTERM and %d SIGKILL (%d to the kernel's holder, %d to a runner letting go); "+
		"killer sent %d SIGKILL, %d SIGTERM (%d reached waiting starters), %d restart requests; "+
		"handoff after a takeover: max %v (witness line %d), mean %v over %d; longest time without a runner: %v; "+
		"Status sampled %d times, %d checked against the kernel (%d held by a passing starter, not there on a second look); "+
		"%d workers in runners' trees, %d left orphans by a killed runner, %d signals to workers; "+
		"killer unlinked a lock file %d times, %d runners stopped on RestartLost",
		f.spawned, f.calls, f.admissions, f.superseded, f.supersededChecked, f.busy,
		f.endJob, f.endRestart, f.endTerm, f.endStop, f.diedHolding,
		f.takeovers, f.libTerms, f.libKills, f.signalsToHolder, f.signalsLettingGo,
		f.killerKills, f.killerTerms, f.termsWaiting, f.killerRestarts,
		f.maxHandoff.Round(time.Millisecond), f.maxHandoffLine, mean.Round(time.Millisecond), f.handoffs, f.maxIdle.Round(time.Millisecond),
		f.statusSamples, f.statusChecked, f.statusTransient,
		f.workers, f.orphans, f.orphanSignals, f.killerUnlinks, f.endLost)
}

// analyseWitness checks the witness log line by line and counts.
func analyseWitness(t *testing.T, data []byte) *chaosFigures {
	t.Helper()
	fig := &chaosFigures{}
	type runner struct {
		proc     string // procKey
		seq      uint64
		last     int64  // ns of its last line
		ended    string // end reason, "" while running
		signals  int    // signals starters sent it while it was the holder
		startIdx int
	}
	var (
		cur         *runner // the runner of the last "start"
		admittedSeq uint64
		everRunner  = map[string]bool{}
		workerOf    = map[string]string{} // chaos workers, and the runner whose tree they are in
		endedAt     = map[string]int64{}  // runners' end lines
		killerTerm  = map[string]int{}    // killer SIGTERMs not yet accounted for
		lateSignals = map[string][]int{}
	)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Errorf("witness line %d is torn: %q", i+1, line)
			continue
		}
		ns, err1 := strconv.ParseInt(f[0], 10, 64)
		proc := f[1]
		if err1 != nil || keyPID(proc) <= 0 {
			t.Errorf("witness line %d is torn: %q", i+1, line)
			continue
		}
		kind, args := f[2], f[3:]
		switch kind {
		case "call":
			fig.calls++
		case "start":
			fig.admissions++
			seq, _ := strconv.ParseUint(args[0], 10, 64)
			if seq <= admittedSeq {
				t.Errorf("witness line %d: process %s admitted with gate seq %d after seq %d was admitted: an older starter won", i+1, proc, seq, admittedSeq)
			}
			admittedSeq = seq
			if cur != nil {
				gap := time.Duration(ns - cur.last)
				if cur.ended == "" {
					fig.diedHolding++
					for _, runner := range workerOf {
						if runner == cur.proc {
							fig.orphans++
						}
					}
				}
				displaced := cur.ended == "restart" || cur.ended == "term" || (cur.ended == "" && cur.signals > 0)
				if displaced {
					fig.takeovers++
					fig.handoffs++
					fig.sumHandoff += gap
					if gap > fig.maxHandoff {
						fig.maxHandoff, fig.maxHandoffLine = gap, i+1
					}
				}
				fig.maxIdle = max(fig.maxIdle, gap)
			}
			cur = &runner{proc: proc, seq: seq, last: ns, startIdx: i}
			everRunner[proc] = true
		case "tick", "end":
			if cur == nil || proc != cur.proc {
				holder := "none"
				if cur != nil {
					holder = cur.proc
				}
				t.Errorf("witness line %d: process %s wrote %q while process %s held the directory: two runners overlapped", i+1, proc, kind, holder)
				continue
			}
			if cur.ended != "" {
				t.Errorf("witness line %d: process %s wrote %q after its end", i+1, proc, kind)
			}
			cur.last = ns
			if kind == "end" {
				endedAt[proc] = ns
				cur.ended = args[0]
				switch args[0] {
				case "job-done":
					fig.endJob++
				case "restart":
					fig.endRestart++
				case "term":
					fig.endTerm++
				case "stop":
					fig.endStop++
				case "lost":
					fig.endLost++
				}
			}
		case "ostart", "otick":
			runner := args[0]
			if kind == "ostart" {
				fig.workers++
				workerOf[proc] = runner
			}
			if cur == nil || cur.proc != runner {
				holder := "none"
				if cur != nil {
					holder = cur.proc
				}
				t.Errorf("witness line %d: worker %s of runner %s wrote %q while %s held the directory: an orphan outlived its runner into the next one's time", i+1, proc, runner, kind, holder)
			}
		case "signal":
			target := args[0]
			sig, _ := strconv.Atoi(args[1])
			held := args[2] == "true"
			switch syscall.Signal(sig) {
			case syscall.SIGTERM:
				fig.libTerms++
			case syscall.SIGKILL:
				fig.libKills++
			}
			switch {
			case workerOf[target] != "":
				fig.orphanSignals++
			case held:
				fig.signalsToHolder++
				if cur != nil && cur.proc == target {
					cur.signals++
				}
			case everRunner[target]:
				fig.signalsLettingGo++
				if end, ok := endedAt[target]; ok {
					fig.maxSignalAfterEnd = max(fig.maxSignalAfterEnd, time.Duration(ns-end))
				}
			default:
				// Not the holder and never a runner so far: legitimate only
				// if it had been admitted and died before its "start" line
				// (then it never writes one). Checked at the end.
				lateSignals[target] = append(lateSignals[target], i+1)
			}
		case "killer":
			target := args[0]
			if args[1] == strconv.Itoa(int(syscall.SIGTERM)) {
				killerTerm[target]++
			}
		case "term-waiting":
			if killerTerm[proc] > 0 {
				killerTerm[proc]--
				fig.termsWaiting++
			} else {
				t.Errorf("witness line %d: process %s got a SIGTERM while still waiting in Takeover, and the killer sent none: a starter signalled a non-holder", i+1, proc)
			}
		case "superseded":
			fig.superseded++
			mine, _ := strconv.ParseUint(args[0], 10, 64)
			top, _ := strconv.ParseUint(args[1], 10, 64)
			if mine > 0 {
				fig.supersededChecked++
				if top <= mine {
					t.Errorf("witness line %d: process %s (gate seq %d) was superseded, yet no starter registered after it (gate seq %d)", i+1, proc, mine, top)
				}
			}
		case "busy":
			fig.busy++
		case "bare-ctx":
			fig.busy++
			fig.bareCtx++
		case "nothold":
			t.Errorf("witness line %d: process %s was admitted while its fdinfo showed no lock on runner.lock (/proc/locks listed %v)", i+1, proc, args)
		case "hung":
			t.Errorf("witness line %d: process %s: Takeover hung: %v", i+1, proc, args)
		case "error":
			t.Errorf("witness line %d: process %s: Takeover failed: %v", i+1, proc, args)
		case "killer-restart", "killer-unlink":
		default:
			t.Errorf("witness line %d: unknown kind %q", i+1, kind)
		}
	}
	for target, at := range lateSignals {
		if everRunner[target] {
			t.Errorf("witness lines %v: process %s was signalled before it was ever the runner, and became the runner later: a waiting starter was signalled", at, target)
		} else {
			// Admitted, then killed before it could say so; or signalled
			// while waiting and killed by it. The second would have shown
			// as "term-waiting" for a SIGTERM; count it as letting go.
			fig.signalsLettingGo += len(at)
		}
	}
	return fig
}

// Case (one the chaos test meets): a starter whose context ends while a live
// runner holds the directory gets a *BusyError naming the holder and
// wrapping the context's error, however early the context ends.
func TestTakeoverContextEndIsBusy(t *testing.T) {
	dir := t.TempDir()
	old := startChild(t, "acquire", dir)
	old.Expect("acquired")
	var bare []string
	for _, d := range []time.Duration{0, time.Millisecond, 50 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		_, err := Takeover(ctx, dir, TakeoverOptions{Grace: time.Hour})
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "context ending after %v", d)
		var be *BusyError
		if !errors.As(err, &be) {
			bare = append(bare, fmt.Sprintf("after %v: %T %q", d, err, err))
			continue
		}
		assert.Equal(t, old.PID(), be.PID)
	}
	st, err := Status(dir)
	require.NoError(t, err)
	assert.Empty(t, st.Waiting, "the starters withdrew")
	require.NoError(t, old.Stop())
	if len(bare) > 0 {
		t.Fatalf("regression: Takeover returned the bare context error, not a *BusyError naming the holder (errors.Is(err, ErrBusy) is false): %s. takeover.go run(): the error of t.step(ctx), which ends with `return next, ctx.Err()`, is returned as is; it should be t.busy(ctx.Err()) when ctx ended", strings.Join(bare, "; "))
	}
}

// Case (one the chaos test meets, where a starter's SIGTERM would reach a
// runner 137-340 ms after it released the directory): a runner that lets go of
// the lock while a starter is deciding to signal it is not signalled. The
// runner here drops its lock at the instant the starter pins it, after the
// starter saw it hold the lock and before the SIGTERM that is due; it lives
// on, as a runner finishing its exit does.
func TestTakeoverNeverSignalsAfterRelease(t *testing.T) {
	dir := t.TempDir()
	holder := startChild(t, "bare-holder", dir)
	holder.Expect("locked")
	data, err := os.ReadFile(filepath.Join(dir, LockName))
	require.NoError(t, err)
	id, ok := parseLockContent(data)
	require.True(t, ok)
	// A takeover's escalation against this holder whose grace ran out long ago,
	// kept alive by a waiting starter (this process, older than the one to
	// come): the SIGTERM is due at the new starter's first look.
	now := time.Now()
	writeJSON(t, filepath.Join(dir, gateName), gateState{
		Seq:        1,
		Waiting:    []gateEntry{{Seq: 1, Starter: liveness.Identity(Self()), Since: now}},
		Escalation: &gateEscalation{For: id.Instance, PID: id.PID, Mode: RestartNow, FirstRequestAt: now.Add(-time.Hour)},
	})

	var mu sync.Mutex
	probes := 0
	var sent []string
	defer liveness.SetProbeHook(func(pid int) {
		mu.Lock()
		defer mu.Unlock()
		if pid != id.PID {
			return
		}
		probes++
		// The first probe is the starter's look at the lock file's
		// identity (inspectLock); the second pins it to signal it.
		if probes == 2 {
			holder.Send("unlock")
			holder.Expect("unlocked")
		}
	})()
	defer liveness.SetSignalHook(func(pid int, sig syscall.Signal) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, fmt.Sprintf("%d %v", pid, sig))
	})()
	release, err := Takeover(background(t), dir, TakeoverOptions{Grace: time.Second, KillAfter: 100 * time.Millisecond})
	require.NoError(t, err)
	release()
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, probes, 2, "the holder was pinned")
	if len(sent) > 0 {
		holder.Expect("term")
		t.Fatalf("regression: Takeover sent %v to pid %d after it had released runner.lock (it was alive, finishing). takeover.go step() decides from the inspectLock taken before updateGate (which waits for the state lock) and signal() does not look again: it should check that the pinned pid is still the kernel's exclusive holder (kernelLocks) right before t.pinned.Signal, and skip the step when it is not", sent, id.PID)
	}
	require.NoError(t, holder.Stop())
}

// readProcLocksStable reads /proc/locks until two reads in a row agree.
// It is a seq_file: each read(2) returns at most a page and the next one
// resumes by position, so a lock taken or released between two reads shifts
// the entries and one can be missed or seen twice.
func readProcLocksStable() ([]byte, error) {
	prev, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil, err
	}
	for range 20 {
		cur, err := os.ReadFile("/proc/locks")
		if err != nil {
			return nil, err
		}
		if bytes.Equal(prev, cur) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// The checker tells processes apart by identity: with pid_max 32768 a long
// soak starts several processes with one pid, and a signal to a later
// process that has a former runner's pid is not a signal to that runner.
func TestChaosCheckerTellsProcessesApartByIdentity(t *testing.T) {
	log := strings.Join([]string{
		"1000 100:1 call obey",
		"2000 100:1 start 1 a",
		"3000 100:1 tick",
		"4000 100:1 end job-done",
		"5000 200:9 call obey",
		"6000 200:9 start 2 b",
		// Pid 100 again, another process: a starter killed as it was
		// admitted (it never says start). Not a signal to the first runner.
		"140000000000 300:4 signal 100:77 15 false",
		"150000000000 200:9 end stop",
	}, "\n")
	fig := analyseWitness(t, []byte(log))
	assert.Zero(t, fig.maxSignalAfterEnd, "no signal is attributed to a runner after its end")
	assert.Equal(t, 2, fig.admissions)
	assert.Equal(t, 1, fig.signalsLettingGo, "counted as a starter killed as it was admitted")
}

func init() { registerRole("bare-holder", roleBareHolder) }

// bare-holder: take an exclusive flock on runner.lock in dir and write
// this process's identity into it, as a runner does, and say "locked".
// "unlock" drops the lock (the process lives on) and says "unlocked";
// each SIGTERM is said as "term". It exits when stdin closes.
func roleBareHolder(dir string) int {
	terms := make(chan os.Signal, 4)
	signal.Notify(terms, syscall.SIGTERM)
	l, err := filelock.TryLock(filepath.Join(dir, LockName), filelock.Exclusive, 0o600)
	if err != nil {
		say("error %v", err)
		return 1
	}
	line, _ := jsonLine(Self())
	if err := l.WriteContent(line); err != nil {
		say("error %v", err)
		return 1
	}
	say("locked")
	cmds := commands()
	for {
		select {
		case cmd, ok := <-cmds:
			if !ok {
				return 0
			}
			if cmd == "unlock" {
				l.Release()
				say("unlocked")
			}
		case <-terms:
			say("term")
		}
	}
}

func init() { registerRole("chaos-starter", roleChaosStarter) }

// chaos-starter: Takeover dir once (options: Grace and KillAfter 150 ms,
// context 5 s) and, when admitted, run a job for $JOB, ticking into the
// witness log every 3 ms; with $RUNNERSTATE_TEST_WORKER set, the job also
// has a worker process in the runner's tree (chaos-worker). Behaviour
// (RUNNERSTATE_TEST_BEHAVIOUR): "obey" ends its job on a restart request,
// RestartLost or SIGTERM; "stubborn" ignores restart requests and
// RestartLost; "deaf" ignores them and SIGTERM, and has to be killed.
// Closing stdin ends the job, or the wait, at once. It says "admitted" when
// it is the runner; anything else it says is an error.
func roleChaosStarter(dir string) int {
	// Errors only: with a dozen processes taking over from each other,
	// the warnings about unverifiable holders (a runner between taking
	// the lock and writing its identity) would drown the test log.
	SetLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	w, err := os.OpenFile(os.Getenv(envWitness), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		say("error %v", err)
		return 1
	}
	behaviour := os.Getenv(envBehaviour)
	job, _ := time.ParseDuration(os.Getenv(envJob))
	lockPath := filepath.Join(dir, LockName)
	terms := make(chan os.Signal, 8)
	signal.Notify(terms, syscall.SIGTERM)
	stdinClosed := make(chan struct{})
	go func() {
		for range commands() {
		}
		close(stdinClosed)
	}()
	treePath := filepath.Join(dir, treeLockName)
	defer liveness.SetSignalHook(func(pid int, sig syscall.Signal) {
		// The target is pinned and was verified just before this hook:
		// its pid still names it. It holds the directory when it holds
		// runner.lock, or only tree.lock (a runner whose runner.lock was
		// lost, or an orphan).
		witnessLine(w, "signal", procKey(pid), int(sig), holdsFlock(pid, lockPath) || holdsFlock(pid, treePath))
	})()

	// The starter's own registration in the gate, for the superseded
	// check: seen by polling while Takeover waits.
	self := Self()
	mySeq := make(chan uint64, 1)
	ctx, cancel := context.WithTimeout(context.Background(), chaosWait)
	defer cancel()
	waitDone := make(chan struct{})
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			g, _ := readGate(dir)
			for _, e := range g.Waiting {
				if e.Starter.Instance == self.Instance {
					mySeq <- e.Seq
					return
				}
			}
			select {
			case <-waitDone:
				return
			case <-t.C:
			}
		}
	}()
	go func() {
		select {
		case sig := <-terms:
			// Admitted already (Takeover returns after it publishes and
			// the previous runner exits): then it is the runner's.
			if holdsFlock(os.Getpid(), lockPath) {
				terms <- sig
				return
			}
			witnessLine(w, "term-waiting")
			cancel()
		case <-stdinClosed:
			cancel()
		case <-waitDone:
		}
	}()
	// A watchdog: a Takeover that outlives its context by far is a hang;
	// say so with every goroutine's stack.
	watchdog := time.AfterFunc(chaosWait+15*time.Second, func() {
		witnessLine(w, "hung", "watchdog")
		buf := make([]byte, 1<<20)
		os.Stderr.Write(buf[:runtime.Stack(buf, true)])
		os.Exit(3)
	})
	witnessLine(w, "call", behaviour)
	start := time.Now()
	release, err := Takeover(ctx, dir, TakeoverOptions{Grace: chaosGrace, KillAfter: chaosKillAfter})
	took := time.Since(start)
	watchdog.Stop()
	close(waitDone)
	if took > chaosWait+5*time.Second {
		witnessLine(w, "hung", took)
	}
	seq := uint64(0)
	select {
	case seq = <-mySeq:
	default:
	}
	switch {
	case errors.Is(err, ErrSuperseded):
		g, _ := readGate(dir)
		witnessLine(w, "superseded", seq, g.Seq)
		return 0
	case errors.Is(err, ErrBusy):
		witnessLine(w, "busy", strings.ReplaceAll(err.Error(), " ", "_"))
		return 0
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Documented as a *BusyError wrapping the context's error; see
		// TestTakeoverContextEndIsBusy.
		witnessLine(w, "bare-ctx", strings.ReplaceAll(err.Error(), " ", "_"))
		return 0
	case err != nil:
		witnessLine(w, "error", strings.ReplaceAll(err.Error(), " ", "_"))
		say("error %v", err)
		return 1
	}
	// Admitted means holding runner.lock, or, when it was unlinked (the
	// killer does), still holding tree.lock, which keeps others out.
	if !holdsFlock(os.Getpid(), lockPath) && !holdsFlock(os.Getpid(), treePath) {
		holders, _ := kernelFlockHolders(lockPath)
		witnessLine(w, "nothold", fmt.Sprint(holders))
	}
	g, _ := readGate(dir)
	witnessLine(w, "start", g.Admitted, self.Instance)
	say("admitted")

	jobCtx, cancelJob := context.WithCancel(context.Background())
	defer cancelJob()
	restarts := WatchRestart(jobCtx, dir)
	worker := startChaosWorker(dir)
	tick := time.NewTicker(chaosTick)
	defer tick.Stop()
	done := time.After(job)
	reason := ""
	for reason == "" {
		select {
		case <-tick.C:
			witnessLine(w, "tick")
		case <-done:
			reason = "job-done"
		case <-stdinClosed:
			reason = "stop"
		case mode := <-restarts:
			switch {
			case mode == RestartLost && behaviour == "obey":
				reason = "lost"
			case behaviour == "obey":
				reason = "restart"
			}
		case <-terms:
			if behaviour != "deaf" {
				reason = "term"
			}
		}
	}
	// A good runner stops its worker before it lets go; one killed
	// before it could leaves the worker an orphan.
	stopChaosWorker(worker)
	witnessLine(w, "end", reason)
	release()
	cancelJob()
	for range restarts {
	}
	return 0
}

// startChaosWorker starts, when $RUNNERSTATE_TEST_WORKER is set, a
// chaos-worker that Inherits this runner's tree lock; nil otherwise.
func startChaosWorker(dir string) *exec.Cmd {
	if os.Getenv(envWorker) == "" {
		return nil
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", dir)
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"=chaos-worker", envWorkerOf+"="+selfKey())
	if err := Inherit(dir, cmd); err != nil {
		return nil
	}
	if err := cmd.Start(); err != nil {
		return nil
	}
	return cmd
}

// stopChaosWorker stops a worker with SIGTERM and waits for it.
func stopChaosWorker(cmd *exec.Cmd) {
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// envWorkerOf names, for a chaos worker, the runner whose tree it is in.
const envWorkerOf = "RUNNERSTATE_TEST_WORKER_OF"

func init() { registerRole("chaos-worker", roleChaosWorker) }

// chaos-worker: a runner's worker, in its tree. It says "ostart <runner>" in
// the witness log, then "otick <runner>" every 3 ms until it is signalled;
// it reads no stdin, so a runner killed with kill -9 leaves it running, an
// orphan, as a real worker would be.
func roleChaosWorker(string) int {
	w, err := os.OpenFile(os.Getenv(envWitness), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return 1
	}
	runner := os.Getenv(envWorkerOf)
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	witnessLine(w, "ostart", runner)
	tick := time.NewTicker(chaosTick)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			witnessLine(w, "otick", runner)
		case <-terms:
			return 0
		}
	}
}

// envWorker asks a chaos starter for a worker process in its tree.
const envWorker = "RUNNERSTATE_TEST_WORKER"
