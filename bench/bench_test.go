//go:build linux

// Package bench measures runnerstate side by side, in the same run, with what
// a user would pick instead and with the raw syscall floor. It is a module of
// its own so that the peers never become dependencies of runnerstate's users.
//
//	cd bench && go test -run '^$' -bench . -count 6 | tee new.txt
//	go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da new.txt
//
// The table of docs/benchmarks.md is written from bench/results.txt, a run
// saved there, by `go run ./cmd/report`; never edit its figures by hand.
// Package daemon's tables (daemon_test.go) are written the same way from
// runs of their own, daemon-results.txt and daemon-busy.txt.
//
// Latency benchmarks report percentiles as custom metrics (p50-µs, p99-µs,
// max-µs); with BENCH_SAMPLES=dir they also write their raw samples there, for
// `go run ./cmd/chart`.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/nightlyone/lockfile"
	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/shirou/gopsutil/v4/process"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	// The library's info lines (a stale record cleared, standing by) would
	// drown the results.
	runnerstate.SetLogger(slog.New(slog.DiscardHandler))
	testharness.RunRole(roles)
	os.Exit(m.Run())
}

// ---------------------------------------------------------------------------
// Uncontended exclusive lock + unlock of one path.

func BenchmarkTryLock(b *testing.B) {
	path := filepath.Join(b.TempDir(), "x.lock")
	b.Run("impl=raw-syscalls", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
	// The same plus what safety costs in syscalls alone: O_NOFOLLOW, and the
	// post-lock fstat+lstat that proves the locked inode is still the path's.
	b.Run("impl=raw-syscalls-checked", func(b *testing.B) {
		b.ReportAllocs()
		var fst, pst unix.Stat_t
		for b.Loop() {
			fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
				b.Fatal(err)
			}
			unix.Fstat(fd, &fst)
			unix.Lstat(path, &pst)
			if fst.Ino != pst.Ino {
				b.Fatal("replaced")
			}
			unix.Close(fd)
		}
	})
	// The checked floor plus the filesystem check's one syscall: an
	// fstatfs of the locked descriptor (its magic number says whether the
	// filesystem's locks exclude).
	b.Run("impl=raw-syscalls-checked-fstatfs", func(b *testing.B) {
		b.ReportAllocs()
		var fst, pst unix.Stat_t
		var sfs unix.Statfs_t
		for b.Loop() {
			fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			unix.Fstatfs(fd, &sfs)
			if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
				b.Fatal(err)
			}
			unix.Fstat(fd, &fst)
			unix.Lstat(path, &pst)
			if fst.Ino != pst.Ino {
				b.Fatal("replaced")
			}
			unix.Close(fd)
		}
	})
	b.Run("impl=runnerstate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			unlock, err := runnerstate.TryLock(path)
			if err != nil {
				b.Fatal(err)
			}
			unlock()
		}
	})
	b.Run("impl=gofrs-flock", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f := flock.New(path)
			ok, err := f.TryLock()
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			f.Unlock()
		}
	})
	b.Run("impl=nightlyone-lockfile", func(b *testing.B) {
		pidPath := filepath.Join(b.TempDir(), "x.pid")
		b.ReportAllocs()
		for b.Loop() {
			l, err := lockfile.New(pidPath)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.TryLock(); err != nil {
				b.Fatal(err)
			}
			l.Unlock()
		}
	})
}

// BenchmarkTryLockFilesystemCheck prices the filesystem check (one fstatfs
// of the lock's descriptor, see docs/guarantees.md, "Never admitted on a
// lock that cannot exclude") in the same run: TryLock and unlock with the
// check and without it (fsinfo.Skip), one cycle of each per iteration, each
// timed on its own so that a noisy machine weighs on both alike; and a
// third, the bare open+flock+close TryLock's bound is stated against. It
// reports their medians (check-ns, none-ns, bare-ns) and the ratios of the
// medians (check/none, check/bare).
func BenchmarkTryLockFilesystemCheck(b *testing.B) {
	path := filepath.Join(b.TempDir(), "x.lock")
	var took [3][]time.Duration
	bare := func() time.Duration {
		start := time.Now()
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
		return time.Since(start)
	}
	cycle := func(skip bool) time.Duration {
		if skip {
			defer fsinfo.Skip()()
		}
		start := time.Now()
		unlock, err := runnerstate.TryLock(path)
		if err != nil {
			b.Fatal(err)
		}
		unlock()
		return time.Since(start)
	}
	cycle(false)
	b.ReportAllocs()
	for b.Loop() {
		took[0] = append(took[0], cycle(false))
		took[1] = append(took[1], cycle(true))
		took[2] = append(took[2], bare())
	}
	for i := range took {
		slices.Sort(took[i])
	}
	check, none, floor := took[0][len(took[0])/2], took[1][len(took[1])/2], took[2][len(took[2])/2]
	b.ReportMetric(float64(check.Nanoseconds()), "check-ns")
	b.ReportMetric(float64(none.Nanoseconds()), "none-ns")
	b.ReportMetric(float64(floor.Nanoseconds()), "bare-ns")
	b.ReportMetric(float64(check)/float64(none), "check/none")
	b.ReportMetric(float64(check)/float64(floor), "check/bare")
}

// ---------------------------------------------------------------------------
// "Is a runner alive here?" with a live, verified holder in another process,
// while N unrelated flock locks are held elsewhere on the machine: Running
// confirms the holder from its fdinfo, so its cost must not grow with N.
// The last case adds what makes the kernel's lock table busy: a process
// reading /proc/locks in a loop (as lslocks or a monitoring agent does) and
// processes that take a flock and exit, one after another. Running and
// Status hold no descriptor on a locked file and make no flock call there,
// so they never wait behind that reader. Side by side, what a naive user
// writes (naiveRunning).

func BenchmarkRunning(b *testing.B) {
	dir := b.TempDir()
	holder := testharness.Start(b, "hold-runner", dir)
	holder.Expect("ready")
	defer holder.Stop()
	held := 0
	for _, c := range []struct {
		locks int
		busy  bool // a /proc/locks reader and lock churn beside the probe
	}{{0, false}, {1000, false}, {10000, false}, {10000, true}} {
		n := fmt.Sprint(c.locks)
		if c.locks > held {
			locks := testharness.Start(b, "hold-locks", b.TempDir())
			locks.Send(strconv.Itoa(c.locks - held))
			locks.Expect("ready")
			defer locks.Stop()
			held = c.locks
		}
		if c.busy {
			n += "+reader+churn"
			reader := testharness.Start(b, "read-lock-table", b.TempDir())
			reader.Expect("ready")
			defer reader.Stop()
			churn := testharness.Start(b, "churn-locks", b.TempDir())
			churn.Expect("ready")
			defer churn.Stop()
		}
		b.Run(fmt.Sprintf("locks=%s/impl=runnerstate-Running", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rec, ok, err := runnerstate.Running(dir)
				if err != nil || !ok || rec.PID != holder.PID() {
					b.Fatal(rec.PID, ok, err)
				}
			}
		})
		b.Run(fmt.Sprintf("locks=%s/impl=runnerstate-Status", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				st, err := runnerstate.Status(dir)
				if err != nil || !st.Verified {
					b.Fatal(err, st.Verified)
				}
			}
		})
		b.Run(fmt.Sprintf("locks=%s/impl=gopsutil-naive", n), func(b *testing.B) {
			b.ReportAllocs()
			falseDead := 0
			for b.Loop() {
				ok, err := naiveRunning(dir)
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					falseDead++
				}
			}
			b.ReportMetric(float64(falseDead)/float64(b.N), "false-dead/op")
		})
	}
}

// naiveRunning is what a naive user writes: read the pid from the record and
// ask gopsutil whether that process runs. It is less correct: a recycled pid
// passes, it cannot tell who holds the lock, and its IsRunning compares
// gopsutil's millisecond CreateTime, derived from the wall clock, so it can
// call a live process dead: those answers are counted as false-dead.
func naiveRunning(dir string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, runnerstate.RecordName))
	if err != nil {
		return false, err
	}
	var rec struct {
		PID int32 `json:"pid"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return false, err
	}
	p, err := process.NewProcess(rec.PID)
	if err != nil {
		return false, err
	}
	return p.IsRunning()
}

// ---------------------------------------------------------------------------
// Cross-process handoff: the holder releases; a waiter blocked in another
// process returns from its wait. The waiter stamps CLOCK_MONOTONIC, which is
// one clock for every process of the machine.

func BenchmarkHandoff(b *testing.B) {
	for _, impl := range []string{"flock-blocking", "runnerstate", "gofrs-poll-10ms"} {
		b.Run("impl="+impl, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "x.lock")
			waiter := testharness.Start(b, "handoff-"+impl, path)
			var samples []time.Duration
			for b.Loop() {
				unlock, err := runnerstate.TryLock(path)
				if err != nil {
					b.Fatal(err)
				}
				waiter.Send("go")
				waiter.Expect("waiting")
				if impl == "gofrs-poll-10ms" {
					time.Sleep(15 * time.Millisecond) // it polls: no kernel waiter to see
				} else {
					waitBlocked(b, path, waiter.PID())
				}
				t0 := monotonic()
				unlock()
				t1, err := strconv.ParseInt(waiter.Expect("locked"), 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Duration(t1-t0))
				waiter.Expect("released")
			}
			reportLatency(b, "handoff-"+impl, samples)
			waiter.Stop()
		})
	}
}

// waitBlocked waits until /proc/locks shows pid blocked in flock on path:
// only then does the handoff measure the kernel's wake-up, not a race.
func waitBlocked(b *testing.B, path string, pid int) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		b.Fatal(err)
	}
	want := fmt.Sprintf(" %d %02x:%02x:%d ", pid, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		data, _ := os.ReadFile("/proc/locks")
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "->") && strings.Contains(line, want) {
				return
			}
		}
		time.Sleep(50 * time.Microsecond)
	}
	b.Fatalf("pid %d never blocked on %s", pid, path)
}

// ---------------------------------------------------------------------------
// Contention: 8 processes x 1000 lock/unlock cycles on one path.

func BenchmarkContention(b *testing.B) {
	const procs, cycles = 8, 1000
	for _, impl := range []string{"flock-blocking", "runnerstate"} {
		b.Run("impl="+impl, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "x.lock")
			var waits []time.Duration
			var total time.Duration
			for b.Loop() {
				var kids []*testharness.Child
				for range procs {
					kids = append(kids, testharness.Start(b, "contend-"+impl, path))
				}
				for _, k := range kids {
					k.Expect("ready")
				}
				start := time.Now()
				for _, k := range kids {
					k.Send(strconv.Itoa(cycles))
				}
				for _, k := range kids {
					for _, f := range strings.Fields(k.Expect("waits")) {
						ns, _ := strconv.ParseInt(f, 10, 64)
						waits = append(waits, time.Duration(ns))
					}
				}
				total += time.Since(start)
				for _, k := range kids {
					k.Stop()
				}
			}
			n := float64(b.N * procs * cycles)
			b.ReportMetric(n/total.Seconds(), "locks/s")
			slices.Sort(waits)
			med := waits[len(waits)/2]
			b.ReportMetric(float64(med.Microseconds()), "median-wait-µs")
			b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "p99-wait-µs")
			b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "max-wait-µs")
			if med > 0 {
				b.ReportMetric(float64(waits[len(waits)-1])/float64(med), "max/median")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// ---------------------------------------------------------------------------
// Takeover of a runner that honours "now" at once, against the old runner's
// own exit time after the same request.

func BenchmarkTakeover(b *testing.B) {
	b.Run("impl=old-runner-exit", func(b *testing.B) {
		dir := b.TempDir()
		var samples []time.Duration
		for b.Loop() {
			old := testharness.Start(b, "obey-runner", dir)
			old.Expect("ready")
			t0 := time.Now()
			if err := runnerstate.RequestRestart(dir, runnerstate.RestartNow); err != nil {
				b.Fatal(err)
			}
			old.Wait()
			samples = append(samples, time.Since(t0))
		}
		reportLatency(b, "takeover-floor", samples)
	})
	b.Run("impl=runnerstate", func(b *testing.B) {
		dir := b.TempDir()
		var samples []time.Duration
		for b.Loop() {
			old := testharness.Start(b, "obey-runner", dir)
			old.Expect("ready")
			t0 := time.Now()
			release, err := runnerstate.Takeover(context.Background(), dir, runnerstate.TakeoverOptions{Grace: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(t0))
			release()
			old.Wait()
		}
		reportLatency(b, "takeover", samples)
	})
}

// ---------------------------------------------------------------------------
// Standby wake-up after the holder exits.

func BenchmarkStandbyWake(b *testing.B) {
	dir := b.TempDir()
	var samples []time.Duration
	for b.Loop() {
		holder := testharness.Start(b, "obey-runner", dir)
		holder.Expect("ready")
		got := make(chan time.Time, 1)
		go func() {
			runnerstate.Standby(context.Background(), dir, runnerstate.StandbyOptions{})
			got <- time.Now()
		}()
		// Let Standby see the holder first.
		time.Sleep(20 * time.Millisecond)
		t0 := time.Now()
		holder.Kill()
		samples = append(samples, (<-got).Sub(t0))
		holder.Wait()
	}
	reportLatency(b, "standby", samples)
}

// ---------------------------------------------------------------------------
// WatchRestart: from the RequestRestart call (which writes and fsyncs
// restart.json) to the runner receiving the mode (inotify on Linux).

func BenchmarkWatchRestart(b *testing.B) {
	dir := b.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	modes := runnerstate.WatchRestart(ctx, dir)
	var samples []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := runnerstate.RequestRestart(dir, runnerstate.RestartDrain); err != nil {
			b.Fatal(err)
		}
		<-modes
		samples = append(samples, time.Since(t0))
		if err := runnerstate.ClearRestart(dir); err != nil {
			b.Fatal(err)
		}
	}
	reportLatency(b, "watch-restart", samples)
}

// ---------------------------------------------------------------------------
// Status as work grows: waiting starters and a large state file.

func BenchmarkStatus(b *testing.B) {
	for _, tc := range []struct {
		waiting, lines int
	}{{0, 0}, {10, 0}, {100, 0}, {0, 10000}} {
		b.Run(fmt.Sprintf("waiting=%d/lines=%d", tc.waiting, tc.lines), func(b *testing.B) {
			dir := b.TempDir()
			release, err := runnerstate.Acquire(dir)
			if err != nil {
				b.Fatal(err)
			}
			defer release()
			if err := runnerstate.Publish(dir, runnerstate.Record{}); err != nil {
				b.Fatal(err)
			}
			writeGate(b, dir, tc.waiting)
			if tc.lines > 0 {
				lines := make([]string, tc.lines)
				for i := range lines {
					lines[i] = fmt.Sprintf("job-%06d done", i)
				}
				if err := runnerstate.SaveLines(dir, "done", lines); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				st, err := runnerstate.Status(dir)
				if err != nil || !st.Verified || len(st.Waiting) != tc.waiting {
					b.Fatal(err, st.Verified, len(st.Waiting))
				}
			}
		})
	}
}

// writeGate writes a takeover gate with n waiting starters, all this process
// (so they verify as live).
func writeGate(b *testing.B, dir string, n int) {
	type entry struct {
		Seq     uint64               `json:"seq"`
		Starter runnerstate.Identity `json:"starter"`
		Since   time.Time            `json:"since"`
	}
	g := struct {
		Seq     uint64  `json:"seq"`
		Waiting []entry `json:"waiting"`
	}{Seq: uint64(n)}
	for i := range n {
		g.Waiting = append(g.Waiting, entry{Seq: uint64(i + 1), Starter: runnerstate.Self(), Since: time.Now()})
	}
	data, _ := json.Marshal(g)
	if err := os.WriteFile(filepath.Join(dir, "gate.json"), data, 0o644); err != nil {
		b.Fatal(err)
	}
}

// ---------------------------------------------------------------------------
// Helpers.

func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func reportLatency(b *testing.B, name string, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	b.ReportMetric(float64(q(0.50).Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(q(0.99).Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(s[len(s)-1].Nanoseconds())/1e3, "max-µs")
	b.ReportMetric(0, "ns/op")
	if dir := os.Getenv("BENCH_SAMPLES"); dir != "" {
		f, err := os.OpenFile(filepath.Join(dir, name+".txt"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			for _, d := range samples {
				fmt.Fprintln(f, d.Nanoseconds())
			}
			f.Close()
		}
	}
}
