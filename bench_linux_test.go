//go:build linux

package runnerstate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The benchmarks of the runner's tree (tree.lock), in the package because
// they price internals: the second lock of a hold, the search for orphans,
// and the time a runner takes to learn that its lock file is gone. The
// side-by-side comparisons of the public API with peers live in bench/.
//
//	go test -run '^$' -bench 'Acquire|OrphanSearch|RestartLost' -count 10 . | tee tree.txt
//	go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da -col /pair tree.txt

// BenchmarkAcquire prices tree.lock: Acquire and release of a free directory
// with the pair of locks every hold takes (pair=runner+tree), and, in the
// same run, with runner.lock alone (pair=runner), the hold without it.
func BenchmarkAcquire(b *testing.B) {
	for _, sole := range []bool{false, true} {
		name := "pair=runner+tree"
		if sole {
			name = "pair=runner"
		}
		b.Run(name, func(b *testing.B) {
			testWithoutTreeLock.Store(sole)
			defer testWithoutTreeLock.Store(false)
			dir := b.TempDir()
			release, err := Acquire(dir) // the files exist, as on every Acquire but a directory's first
			if err != nil {
				b.Fatal(err)
			}
			release()
			b.ReportAllocs()
			for b.Loop() {
				release, err := Acquire(dir)
				if err != nil {
					b.Fatal(err)
				}
				release()
			}
		})
	}
}

// BenchmarkAcquireTreeRatio is BenchmarkAcquire's two cases interleaved,
// one cycle of each per iteration, each timed on its own, so that a noisy
// machine weighs on both alike: it reports their medians (pair-µs,
// sole-µs) and the ratio of the medians (pair/sole). The cycle is Acquire
// and release, or (cycle=publish) a runner's shortest life: Acquire,
// Publish, release.
func BenchmarkAcquireTreeRatio(b *testing.B) {
	for _, publish := range []bool{false, true} {
		name := "cycle=acquire"
		if publish {
			name = "cycle=publish"
		}
		b.Run(name, func(b *testing.B) {
			defer testWithoutTreeLock.Store(false)
			dirs := [2]string{b.TempDir(), b.TempDir()}
			var took [2][]time.Duration
			cycle := func(sole int) time.Duration {
				testWithoutTreeLock.Store(sole == 1)
				start := time.Now()
				release, err := Acquire(dirs[sole])
				if err != nil {
					b.Fatal(err)
				}
				if publish {
					if err := Publish(dirs[sole], Record{}); err != nil {
						b.Fatal(err)
					}
				}
				release()
				return time.Since(start)
			}
			cycle(0)
			cycle(1)
			b.ReportAllocs()
			for b.Loop() {
				for sole := range 2 {
					took[sole] = append(took[sole], cycle(sole))
				}
			}
			pair, sole := median(took[0]), median(took[1])
			b.ReportMetric(pair.Seconds()*1e6, "pair-µs")
			b.ReportMetric(sole.Seconds()*1e6, "sole-µs")
			b.ReportMetric(float64(pair)/float64(sole), "pair/sole")
		})
	}
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkOrphanSearch is the search that names the orphans holding a
// directory's tree.lock (what Acquire's refusal, Status and Takeover run
// when only tree.lock is held), with procs more processes on the machine
// (sleep(1) children, each with its three standard descriptors). It scans
// every process's descriptors, so it grows with the machine: the "procs"
// metric is how many processes /proc listed, and ns/proc the cost per
// process; the slope between two runs is the cost of one more process.
func BenchmarkOrphanSearch(b *testing.B) {
	for _, extra := range []int{0, 250, 500, 1000} {
		b.Run(fmt.Sprintf("procs=+%d", extra), func(b *testing.B) {
			dir := b.TempDir()
			orphan := startTreeHolder(b, dir)
			startSleepers(b, extra)
			procs := countProcs(b)
			b.ReportAllocs()
			for b.Loop() {
				pids, _ := orphans(dir, 0)
				if !slices.Contains(pids, orphan) {
					b.Fatalf("orphans(%s) = %v, want %d among them", dir, pids, orphan)
				}
			}
			b.ReportMetric(float64(procs), "procs")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(procs), "ns/proc")
		})
	}
}

// BenchmarkRestartLost is the time from the removal of runner.lock (the
// unlink returning) to WatchRestart's RestartLost reaching the runner, with
// the holder's watch already running; percentiles as p50-µs, p99-µs.
func BenchmarkRestartLost(b *testing.B) {
	dir := b.TempDir()
	samples := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		release, err := Acquire(dir)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		modes := WatchRestart(ctx, dir)
		b.StartTimer()
		start := time.Now()
		if err := os.Remove(filepath.Join(dir, LockName)); err != nil {
			b.Fatal(err)
		}
		select {
		case mode := <-modes:
			samples = append(samples, time.Since(start))
			if mode != RestartLost {
				b.Fatalf("WatchRestart offered %q, want %q", mode, RestartLost)
			}
		case <-time.After(10 * time.Second):
			b.Fatalf("no %s within 10s of removing %s", RestartLost, filepath.Join(dir, LockName))
		}
		b.StopTimer()
		cancel()
		release()
		b.StartTimer()
	}
	slices.Sort(samples)
	at := func(q float64) float64 {
		return float64(samples[int(q*float64(len(samples)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

// startTreeHolder leaves dir's tree.lock held by a sleep(1) child and by
// nobody else, as a runner's orphan holds it once the runner is gone: the
// lock is taken here, handed on as the child's descriptor 3 and closed
// here. It returns the child's pid.
func startTreeHolder(b *testing.B, dir string) int {
	b.Helper()
	f, err := os.OpenFile(filepath.Join(dir, treeLockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("sleep", "3600")
	cmd.ExtraFiles = []*os.File{f}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

// startSleepers starts n sleep(1) children, killed and reaped at cleanup.
func startSleepers(b *testing.B, n int) {
	b.Helper()
	cmds := make([]*exec.Cmd, 0, n)
	b.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
		for _, c := range cmds {
			c.Wait()
		}
	})
	for range n {
		c := exec.Command("sleep", "3600")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, c)
	}
}

// countProcs is the number of processes /proc lists now.
func countProcs(b *testing.B) int {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			n++
		}
	}
	return n
}
