//go:build linux

package examples_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDaemonStory plays examples/daemon's story as docs/operations.md tells
// it, with the binary built and its default directory (under $TMPDIR): two
// pings at once start one server; "add 5" borrows the runner role in the
// foreground while the server's runner stands by, then takes it back; a
// second serve takes over, and pings never fail while it does.
func TestDaemonStory(t *testing.T) {
	daemon, tmp := buildDaemon(t), t.TempDir()
	env := append(os.Environ(), "TMPDIR="+tmp, "XDG_RUNTIME_DIR=")
	dir := defaultDir(tmp, "runnerstate-daemon")
	stack := filepath.Join(dir, "stack")
	serverLog := filepath.Join(stack, "runner.log")
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(daemon, args...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	lastLine := func(s string) string {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		return lines[len(lines)-1]
	}
	readLog := func(path string) string { data, _ := os.ReadFile(path); return string(data) }
	waitLog := func(path, what string, n int) {
		t.Helper()
		deadline := time.Now().Add(storyWait)
		for strings.Count(readLog(path), what) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s never logged %q %d times:\n%s", path, what, n, readLog(path))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Whatever happens, every server is asked to go at the end.
	t.Cleanup(func() {
		runnerstate.RequestRestart(stack, runnerstate.RestartNow)
		deadline := time.Now().Add(storyWait)
		for time.Now().Before(deadline) {
			if _, ok, _ := runnerstate.Running(stack); !ok {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	// Two terminals at once: one server is started, both talk to it.
	var wg sync.WaitGroup
	pings, starts := make([]string, 2), make([]string, 2)
	for i := range pings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stdout, stderr, err := run("ping")
			assert.NoError(t, err, stderr)
			pings[i], starts[i] = stdout, stderr
		}()
	}
	wg.Wait()
	assert.Equal(t, []string{"", ""}, starts, "the library prints nothing on a client's stderr, not even that it started the server")
	first := lastLine(pings[0])
	require.Equal(t, first, lastLine(pings[1]), "both pings reached the same server")
	assert.Contains(t, pings[0], "pong from pid "+first+": runner serving, total 0")
	waitLog(serverLog, "serve: serving", 1)
	assert.Equal(t, 1, strings.Count(readLog(serverLog), "serve: serving"), "one server started:\n%s", readLog(serverLog))

	// The foreground borrows the runner role; the server's runner stands by
	// and takes it back.
	stdout, stderr, err := run("add", "5")
	require.NoError(t, err, stderr)
	assert.Contains(t, stdout, "total 5")
	assert.Empty(t, stderr, "nor on the foreground command's")
	waitLog(serverLog, "standing by until it is done", 1)
	waitLog(serverLog, "runner: holding the runner role", 2)
	assert.NotContains(t, readLog(serverLog), "signalled", "the server's runner is asked, never signalled")
	stdout, stderr, err = run("ping")
	require.NoError(t, err, stderr)
	assert.Contains(t, stdout, "pong from pid "+first+": runner serving, total 5")

	// A second server (a new build, say) takes over: the first drains and
	// hands its socket over, and pings never fail meanwhile.
	stopPings := make(chan struct{})
	var pingFailures []string
	var pinger sync.WaitGroup
	pinger.Go(func() {
		for {
			select {
			case <-stopPings:
				return
			default:
			}
			if _, stderr, err := run("ping"); err != nil {
				pingFailures = append(pingFailures, stderr)
			}
		}
	})
	secondLog := filepath.Join(t.TempDir(), "second.log")
	logFile, err := os.Create(secondLog)
	require.NoError(t, err)
	defer logFile.Close()
	second := exec.Command(daemon, "serve")
	second.Env, second.Stdout, second.Stderr = env, logFile, logFile
	require.NoError(t, second.Start())
	secondDone := make(chan error, 1)
	go func() { secondDone <- second.Wait() }()
	t.Cleanup(func() { second.Process.Kill(); <-secondDone })
	waitLog(secondLog, "serve: serving", 1)
	waitLog(serverLog, "serve: asked to go", 1)
	close(stopPings)
	pinger.Wait()
	assert.Empty(t, pingFailures, "no ping failed while the second server took over")
	assert.Contains(t, readLog(secondLog), "handed_over=1", "the first server's socket was handed over")
	stdout, stderr, err = run("ping")
	require.NoError(t, err, stderr)
	assert.Contains(t, stdout, "total 5")
	assert.NotEqual(t, first, lastLine(stdout), "the second server serves now")
}

// TestDaemonPingReportsAFailedStart: a server that cannot start makes ping
// exit 1 with the tail of its log.
func TestDaemonPingReportsAFailedStart(t *testing.T) {
	daemon, dir := buildDaemon(t), t.TempDir()
	// A directory where the server's socket belongs, with something in it.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "stack", "daemon.sock", "x"), 0o755))
	stderr := pingFails(t, daemon, dir)
	assert.Contains(t, stderr, "exited with status 1")
	assert.Contains(t, stderr, "could not listen")
	assert.Contains(t, stderr, "not a socket")
}

// TestDaemonPingSaysTheSocketPathIsTooLong: a --dir whose socket path does not
// fit a unix socket's address makes the server say so (not bind's bare
// "invalid argument"), and ping report it with the log's tail.
func TestDaemonPingSaysTheSocketPathIsTooLong(t *testing.T) {
	daemon := buildDaemon(t)
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	assert.Contains(t, pingFails(t, daemon, dir), "a unix socket address holds")
}

// pingFails runs "daemon ping --dir dir", which must exit 1 (the server
// could not start), and returns its standard error.
func pingFails(t *testing.T, daemon, dir string) string {
	t.Helper()
	cmd := exec.Command(daemon, "ping", "--dir", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, stderr.String())
	assert.Equal(t, 1, ee.ExitCode())
	return stderr.String()
}

// TestDaemonAddTakesANegativeNumber: "add -3" adds minus three (it is not an
// unknown flag), and "add" without N says what is missing.
func TestDaemonAddTakesANegativeNumber(t *testing.T) {
	daemon, dir := buildDaemon(t), t.TempDir()
	out, err := exec.Command(daemon, "add", "-3", "--dir", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "added -3 in the foreground")
	assert.Contains(t, string(out), "total -3")

	out, err = exec.Command(daemon, "add", "--dir", dir).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	assert.Equal(t, 2, ee.ExitCode())
	assert.Contains(t, string(out), "daemon add: say how much to add")
}

// buildDaemon builds examples/daemon into the test's temporary directory.
func buildDaemon(t *testing.T) string {
	t.Helper()
	daemon := filepath.Join(t.TempDir(), "daemon")
	out, err := exec.Command("go", "build", "-o", daemon, "./daemon").CombinedOutput()
	require.NoError(t, err, "go build ./daemon: %s", out)
	return daemon
}
