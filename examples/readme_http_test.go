//go:build linux

package examples_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/daemon"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADMEHTTPServerLosesNoRequestThroughUpgrades: the README's HTTP
// server, built from the README as written, answers every request of
// Apache's ab (8 at a time, no keep-alive) while it is upgraded 10 times: a
// new copy of it takes the directory over, the old one drains and hands its
// listening socket over. 0 failed requests, 0 refused connects.
func TestREADMEHTTPServerLosesNoRequestThroughUpgrades(t *testing.T) {
	ab, err := exec.LookPath("ab")
	if err != nil {
		t.Skip("no ab here (Debian: apt-get install apache2-utils); .ci/run installs it")
	}
	server := buildREADMEServer(t)
	dir := filepath.Join(t.TempDir(), "d")
	logs := t.TempDir()
	var procs []*exec.Cmd
	var waits []chan error
	start := func() int {
		t.Helper()
		log, err := os.Create(filepath.Join(logs, strconv.Itoa(len(procs))+".log"))
		require.NoError(t, err)
		defer log.Close()
		cmd := exec.Command(server, dir)
		cmd.Stdout, cmd.Stderr = log, log
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		procs, waits = append(procs, cmd), append(waits, done)
		return cmd.Process.Pid
	}
	t.Cleanup(func() {
		for i, p := range procs {
			p.Process.Kill()
			<-waits[i]
		}
	})
	ready := func(pid int) runnerstate.Record {
		t.Helper()
		deadline := time.Now().Add(storyWait)
		for {
			rec, held, _ := runnerstate.Running(dir)
			if held && rec.Ready && rec.PID == pid && len(rec.Endpoints) > 0 {
				return rec
			}
			require.True(t, time.Now().Before(deadline), "server pid %d never ready", pid)
			time.Sleep(5 * time.Millisecond)
		}
	}
	rec := ready(start())
	addr := rec.Endpoints[0].Address

	var abOut bytes.Buffer
	load := exec.Command(ab, "-r", "-q", "-c", "8", "-n", "100000000", "-t", "60", "http://"+addr+"/")
	load.Stdout, load.Stderr = &abOut, &abOut
	require.NoError(t, load.Start())
	loadDone := make(chan error, 1)
	go func() { loadDone <- load.Wait() }()
	t.Cleanup(func() { load.Process.Kill(); <-loadDone })

	const upgrades = 10
	began := time.Now()
	for i := range upgrades {
		old := len(procs) - 1
		pid := start()
		got := ready(pid)
		assert.Equal(t, addr, got.Endpoints[0].Address, "the port is kept")
		select {
		case err := <-waits[old]:
			waits[old] <- err
			assert.NoError(t, err, "server %d exits 0 once replaced", old)
		case <-time.After(storyWait):
			t.Fatalf("server %d never exited after upgrade %d", old, i+1)
		}
	}
	took := time.Since(began)
	if err := load.Process.Signal(syscall.SIGINT); err != nil { // ab prints what it has
		require.ErrorIs(t, err, os.ErrProcessDone, "ab ended by itself (its 60 s)")
	}
	select {
	case <-loadDone:
		loadDone <- nil
	case <-time.After(storyWait):
		t.Fatal("ab did not stop")
	}
	out := abOut.String()
	complete, failed := abCount(t, out, "Complete requests"), abCount(t, out, "Failed requests")
	t.Logf("%d upgrades in %v under ab -c 8: %d requests, %d failed", upgrades, took.Round(time.Millisecond), complete, failed)
	assert.Greater(t, complete, 0, out)
	assert.Zero(t, failed, "no request is lost at an upgrade:\n%s", out)
	assert.NotContains(t, out, "apr_socket", "no connect refused or reset:\n%s", out)

	require.NoError(t, daemon.Stop(t.Context(), dir, runnerstate.RestartDrain))
}

// abCount reads a count from ab's report ("Failed requests:        0").
func abCount(t *testing.T, out, what string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + what + `:\s+(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "ab reports %q:\n%s", what, out)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// buildREADMEServer builds the README's daemon server (its first Go block
// under "A server and its client") as written, with a handler that answers
// "ok", in a program whose argument is the directory.
func buildREADMEServer(t *testing.T) string {
	t.Helper()
	blocks := testharness.READMEDaemonBlocks(t, "../README.md")
	program := "package main\n\n" + testharness.READMEDaemonImports + `
var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })

func main() {
	_ = client
	if err := serve(context.Background(), os.Args[1]); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

` + strings.Join(blocks, "\n\n") + "\n"
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	bin, out, err := testharness.BuildOverlaid(t, root, "internal/readmehttp", program)
	require.NoError(t, err, "the README's server does not build:\n%s\n%s", out, program)
	return bin
}
