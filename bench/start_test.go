//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
)

// Start's benchmarks. The runner Start starts is this test binary playing
// "start-runner": it stamps CLOCK_MONOTONIC when its package is loaded
// (processLoaded) and right after its Publish, and writes both into
// stamps in its directory, so that what Start adds to the runner's own
// time can be told apart from it.

// processLoaded is when this process's package variables were set: the first
// moment of a started runner that it can measure itself, after exec and the
// Go runtime's start.
var processLoaded = monotonic()

const stampsName = "stamps"

func init() {
	roles["start-runner"] = startRunner
	roles["start-callers"] = startCallers
}

// start-runner: with BENCH_START_DIE set, write "died <ns>" into stamps and
// exit 3 at once; otherwise Acquire, Publish, write "<loaded ns> <published
// ns>" into stamps, append its pid to spawns, and exit at the first restart
// request.
func startRunner(dir string) int {
	if os.Getenv("BENCH_START_DIE") != "" {
		os.WriteFile(filepath.Join(dir, stampsName), []byte(fmt.Sprintf("died %d\n", monotonic())), 0o644)
		return 3
	}
	if os.Getenv("BENCH_EXEC_FLOOR") != "" {
		os.WriteFile(filepath.Join(dir, stampsName), []byte(fmt.Sprintf("%d\n", processLoaded)), 0o644)
		return 0
	}
	runnerstate.AppendLine(dir, "spawns", strconv.Itoa(os.Getpid()))
	release, err := runnerstate.Acquire(dir)
	if err != nil {
		return fail(err)
	}
	defer release()
	if err := runnerstate.Publish(dir, runnerstate.Record{}); err != nil {
		return fail(err)
	}
	published := monotonic()
	os.WriteFile(filepath.Join(dir, stampsName), []byte(fmt.Sprintf("%d %d\n", processLoaded, published)), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	<-runnerstate.WatchRestart(ctx, dir)
	return 0
}

// start-callers: say "ready"; on "go <n>", call Start on dir from n
// goroutines at once, then say "back <ns>" for each return (CLOCK_MONOTONIC)
// or "error <err>"; exit when stdin closes.
func startCallers(dir string) int {
	fmt.Println("ready")
	cmds := testharness.Commands()
	line := <-cmds
	n, _ := strconv.Atoi(strings.TrimPrefix(line, "go "))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := runnerstate.Start(context.Background(), dir, startCommand(dir), runnerstate.StartOptions{})
			t := monotonic()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
				return
			}
			fmt.Println("back", t)
		}()
	}
	wg.Wait()
	for range cmds {
	}
	return 0
}

// startCommand is the command that plays start-runner in dir.
func startCommand(dir string, env ...string) *exec.Cmd {
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"=start-runner", "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// readStamps waits for the started runner's stamps in dir and returns them.
func readStamps(b *testing.B, dir string) []int64 {
	deadline := time.Now().Add(testharness.Wait)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(filepath.Join(dir, stampsName))
		if err == nil && strings.HasSuffix(string(data), "\n") {
			var stamps []int64
			for _, f := range strings.Fields(string(data)) {
				if v, err := strconv.ParseInt(f, 10, 64); err == nil {
					stamps = append(stamps, v)
				}
			}
			return stamps
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatalf("no stamps in %s", dir)
	return nil
}

// stopRunner asks dir's runner to go and waits until the directory is free
// and the caller that started it has recorded its exit in start.json (its reaper writes
// there once the runner has exited: the directory can be removed then).
func stopRunner(b *testing.B, dir string) {
	if err := runnerstate.RequestRestart(dir, runnerstate.RestartNow); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(testharness.Wait)
	for {
		attempt, _ := os.ReadFile(filepath.Join(dir, "start.json"))
		if _, ok, _ := runnerstate.Running(dir); !ok && strings.Contains(string(attempt), `"ended"`) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the runner of %s did not go", dir)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Start on a ready runner against Running, interleaved in one loop: the
// fast path's cost is about one Running (target ≤ 1.5×).
func BenchmarkStartReady(b *testing.B) {
	dir := b.TempDir()
	holder := testharness.Start(b, "hold-runner", dir)
	holder.Expect("ready")
	defer holder.Stop()
	cmd := exec.Command(filepath.Join(dir, "never-started"))
	b.Run("impl=Running", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := runnerstate.Running(dir); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("impl=Start", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rec, err := runnerstate.Start(context.Background(), dir, cmd, runnerstate.StartOptions{}); err != nil || rec.PID != holder.PID() {
				b.Fatal(rec.PID, err)
			}
		}
	})
	b.Run("impl=interleaved", func(b *testing.B) {
		var running, start time.Duration
		for b.Loop() {
			t0 := time.Now()
			runnerstate.Running(dir)
			t1 := time.Now()
			runnerstate.Start(context.Background(), dir, cmd, runnerstate.StartOptions{})
			running, start = running+t1.Sub(t0), start+time.Since(t1)
		}
		b.ReportMetric(float64(start)/float64(running), "start/running")
	})
}

// Cold Start to ready: the whole call, the runner's own time from its
// package's load to its Publish, and what Start adds: the whole minus the
// runner's own, minus the floor of starting that binary at all (exec.Cmd's
// Start to the child's package load, which the runner cannot stamp: exec,
// the dynamic loader, the Go runtime's start), measured interleaved in the
// same loop (target ≤ 5 ms at p50).
func BenchmarkStartCold(b *testing.B) {
	var whole, own, floor, added []time.Duration
	for i := 0; i < b.N; i++ {
		fdir := b.TempDir()
		cmd := startCommand(fdir, "BENCH_EXEC_FLOOR=1")
		f0 := monotonic()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		fl := time.Duration(readStamps(b, fdir)[0] - f0)
		cmd.Wait()
		floor = append(floor, fl)

		dir := filepath.Join(b.TempDir(), "d")
		t0 := monotonic()
		if _, err := runnerstate.Start(context.Background(), dir, startCommand(dir), runnerstate.StartOptions{}); err != nil {
			b.Fatal(err)
		}
		t1 := monotonic()
		st := readStamps(b, dir)
		whole = append(whole, time.Duration(t1-t0))
		own = append(own, time.Duration(st[1]-st[0]))
		added = append(added, time.Duration(t1-t0-(st[1]-st[0]))-floor[len(floor)-1])
		stopRunner(b, dir)
	}
	reportLatency(b, "start-cold-added", added)
	b.ReportMetric(p50(whole), "whole-p50-µs")
	b.ReportMetric(p50(own), "runner-own-p50-µs")
	b.ReportMetric(p50(floor), "exec-floor-p50-µs")
}

// A runner that dies before it is ready: from its last stamp before exit
// to the *StartError (target ≤ 20 ms at p50).
func BenchmarkStartDiesBeforeReady(b *testing.B) {
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(b.TempDir(), "d")
		_, err := runnerstate.Start(context.Background(), dir, startCommand(dir, "BENCH_START_DIE=1"), runnerstate.StartOptions{})
		t1 := monotonic()
		var se *runnerstate.StartError
		if !errors.As(err, &se) || se.ExitCode != 3 {
			b.Fatal(err)
		}
		lat = append(lat, time.Duration(t1-readStamps(b, dir)[0]))
	}
	reportLatency(b, "start-dies", lat)
}

// 64 concurrent cold Starts from 8 processes: exactly one runner is
// started (spawns/op must be 1), and every caller is back within 10 ms of
// the runner's Publish (the latency metrics: each caller's return minus
// the Publish).
func BenchmarkStartConcurrent64(b *testing.B) {
	var lat []time.Duration
	spawns := 0
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(b.TempDir(), "d")
		var callers []*testharness.Child
		for range 8 {
			c := testharness.Start(b, "start-callers", dir)
			c.Expect("ready")
			callers = append(callers, c)
		}
		for _, c := range callers {
			c.Send("go 8")
		}
		var backs []int64
		for _, c := range callers {
			for range 8 {
				v, err := strconv.ParseInt(c.Expect("back"), 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				backs = append(backs, v)
			}
		}
		published := readStamps(b, dir)[1]
		for _, t := range backs {
			lat = append(lat, time.Duration(t-published))
		}
		lines, _ := runnerstate.LoadLines(dir, "spawns")
		spawns += len(lines)
		stopRunner(b, dir)
		for _, c := range callers {
			c.Stop()
		}
	}
	reportLatency(b, "start-64", lat)
	b.ReportMetric(float64(spawns)/float64(b.N), "spawns/op")
}

func p50(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Nanoseconds()) / 1e3
}
