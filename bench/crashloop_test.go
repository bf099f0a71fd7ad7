//go:build linux

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/daemon"
	"github.com/runnerstate/runnerstate/internal/testharness"
)

// A crash loop: a server whose new build exits 1 at start, and 8 client
// processes that each Dial it once every 100 ms. Side by side: Start's
// backoff across callers, and today's behaviour without it (every Dial
// with NoBackoff: each starts up to 3 copies). Figures: the processes
// started, and how long a Dial in a backoff window takes to say why.
//
// impl=beside-older: the same with an older server (v1.0.0) ready in the
// directory and clients of v2.0.0, so that every Start would replace it
// with the new build: the backoff holds there too.
//
// A scenario lasts crashLoopDuration: BENCH_CRASHLOOP_DURATION (a Go
// duration; docs/benchmarks.md's figures are from 60s), else 3 s, so that
// a run with -benchtime 1x stays short.

func init() {
	roles["crash-server"] = crashServer
	roles["crash-client"] = crashClient
}

const (
	crashClients  = 8
	crashInterval = 100 * time.Millisecond
	envCrashFor   = "BENCH_CRASHLOOP_DURATION"
	envCrashImpl  = "BENCH_CRASHLOOP_IMPL"
	envEchoVer    = "BENCH_ECHO_VERSION" // echo-daemon's Version
)

// crashLoopDuration is how long one scenario's clients dial.
func crashLoopDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(envCrashFor)); err == nil && d > 0 {
		return d
	}
	return 3 * time.Second
}

// crash-server: the new build that cannot start: a line on stderr, exit 1.
func crashServer(string) int {
	fmt.Fprintln(os.Stderr, "panic: config: unknown field \"listen_adress\"")
	return 1
}

// crash-client: Dial base/d once every crashInterval for the duration in
// its environment, and write one line per Dial to base/logs/<pid>: its
// kind ("window": the backoff's answer to a Dial made after the failure
// it quotes had ended; "failed": any other *StartError; "other") and its
// duration in ns.
func crashClient(base string) int {
	dir, _, logs := echoDirs(base)
	d, _ := time.ParseDuration(os.Getenv(envCrashFor))
	noBackoff := os.Getenv(envCrashImpl) == "nobackoff"
	want := ""
	if os.Getenv(envCrashImpl) == "beside-older" {
		want = "v2.0.0"
	}
	server := testharness.Command(base)
	server.Env = append(os.Environ(), testharness.RoleEnv+"=crash-server")
	out, err := os.Create(filepath.Join(logs, strconv.Itoa(os.Getpid())))
	if err != nil {
		return fail(err)
	}
	defer out.Close()
	w := bufio.NewWriter(out)
	defer w.Flush()
	ctx := context.Background() // no deadline: a deadline past RetryAt would wait for it
	tick := time.NewTicker(crashInterval)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		began := time.Now()
		c, _, err := daemon.Dial(ctx, dir, copyCmd(server), daemon.DialOptions{NoBackoff: noBackoff, Version: want})
		took := time.Since(began)
		if c != nil {
			c.Close()
		}
		var se *runnerstate.StartError
		kind := "other"
		switch {
		case errors.As(err, &se) && se.Failures > 0 && se.RetryAt.Add(-retryAfter(se.Failures)).Before(began):
			kind = "window"
		case errors.As(err, &se):
			kind = "failed"
		}
		fmt.Fprintf(w, "%s %d\n", kind, took.Nanoseconds())
	}
	return 0
}

// retryAfter is Start's backoff after k consecutive failures, as its doc
// states it: the clients tell from it when the failure they are told of
// ended.
func retryAfter(k int) time.Duration {
	if k < 2 {
		return 0
	}
	if k-2 >= 7 {
		return 30 * time.Second
	}
	return min(250*time.Millisecond<<(k-2), 30*time.Second)
}

// copyCmd is a fresh copy of cmd: Dial takes a template, but the
// benchmark's own loop passes a new one each time all the same.
func copyCmd(cmd *exec.Cmd) *exec.Cmd {
	c := exec.Command(cmd.Path, cmd.Args[1:]...)
	c.Env = cmd.Env
	return c
}

func BenchmarkCrashLoop(b *testing.B) {
	for _, impl := range []string{"backoff", "nobackoff", "beside-older"} {
		b.Run("impl="+impl, func(b *testing.B) {
			var starts, dials, windows float64
			var inWindow, failed []time.Duration
			for range b.N {
				s, lines := crashLoop(b, impl)
				starts += float64(s)
				for _, l := range lines {
					dials++
					switch l.kind {
					case "window":
						windows++
						inWindow = append(inWindow, l.took)
					case "failed":
						failed = append(failed, l.took)
					}
				}
			}
			n := float64(b.N)
			b.ReportMetric(starts/n, "starts")
			b.ReportMetric(dials/n, "dials")
			b.ReportMetric(windows/n, "window-dials")
			b.ReportMetric(quantile(inWindow, 0.50), "window-p50-µs")
			b.ReportMetric(quantile(inWindow, 0.99), "window-p99-µs")
			b.ReportMetric(quantile(failed, 0.50), "failed-p50-µs")
			b.ReportMetric(quantile(failed, 0.99), "failed-p99-µs")
			b.ReportMetric(crashLoopDuration().Seconds(), "seconds")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// crashLine is one client's Dial.
type crashLine struct {
	kind string
	took time.Duration
}

// crashLoop runs one scenario: the processes started (start.json's
// attempt number), and every client's Dials.
func crashLoop(b *testing.B, impl string) (int, []crashLine) {
	base, err := os.MkdirTemp("", "rsc")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir, _, logs := echoDirs(base)
	for _, d := range []string{dir, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if impl == "beside-older" {
		os.Setenv(envEchoVer, "v1.0.0")
		defer os.Unsetenv(envEchoVer)
		procs := newServerProcs(b, base, "echo-daemon")
		srv := procs.awaitReady(procs.start())
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
			defer cancel()
			if err := daemon.Stop(ctx, dir, runnerstate.RestartNow); err != nil {
				b.Error(err)
			}
			procs.reap(srv)
		}()
	}
	var clients []*exec.Cmd
	for range crashClients {
		cmd := testharness.Command(base)
		cmd.Env = append(os.Environ(), testharness.RoleEnv+"=crash-client", envCrashImpl+"="+impl, envCrashFor+"="+crashLoopDuration().String())
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		clients = append(clients, cmd)
	}
	for _, c := range clients {
		if err := c.Wait(); err != nil {
			b.Errorf("a client: %v", err)
		}
	}
	var lines []crashLine
	isClient := func(name string) bool {
		_, err := strconv.Atoi(name)
		return err == nil // not the older server's stderr
	}
	logLines(b, logs, isClient, func(_, l string) {
		kind, ns, _ := strings.Cut(strings.TrimSpace(l), " ")
		n, _ := strconv.ParseInt(ns, 10, 64)
		lines = append(lines, crashLine{kind, time.Duration(n)})
	})
	data, err := os.ReadFile(filepath.Join(dir, "start.json"))
	if err != nil {
		b.Fatal(err)
	}
	var a struct{ Seq int }
	if err := json.Unmarshal(data, &a); err != nil {
		b.Fatal(err)
	}
	return a.Seq, lines
}
