//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envRunner makes this test binary a runner of the directory it names, for
// runnerctl start to start: Takeover, Publish (Meta "ctl-test"), and exit at
// the first restart request; with envRunnerDie set it prints "boom" and
// exits with that status instead.
const (
	envRunner    = "RUNNERCTL_TEST_RUNNER"
	envRunnerDie = "RUNNERCTL_TEST_RUNNER_DIE"
)

func init() {
	dir := os.Getenv(envRunner)
	if dir == "" {
		return
	}
	if code := os.Getenv(envRunnerDie); code != "" {
		os.Stderr.WriteString("boom\n")
		n, _ := strconv.Atoi(code)
		os.Exit(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release, err := runnerstate.Takeover(ctx, dir, runnerstate.TakeoverOptions{})
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	if err := runnerstate.Publish(dir, runnerstate.Record{Meta: json.RawMessage(`"ctl-test"`)}); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	<-runnerstate.WatchRestart(ctx, dir)
	release()
	os.Exit(0)
}

// stopRunner asks the runner of dir to go when the test ends, and waits
// until it has.
func stopRunner(t *testing.T, dir string) {
	t.Cleanup(func() {
		if _, ok, _ := runnerstate.Running(dir); ok {
			require.NoError(t, runnerstate.RequestRestart(dir, runnerstate.RestartNow))
		}
		testharness.Eventually(t, "the runner goes", func() bool {
			_, ok, _ := runnerstate.Running(dir)
			return !ok
		})
	})
}

// Case: start starts the command when no runner is ready, prints the ready
// record and exits 0; a second start finds it and starts nothing.
func TestStartPrintsTheReadyRecord(t *testing.T) {
	dir := testharness.TempDir(t)
	stopRunner(t, dir)
	t.Setenv(envRunner, dir)
	code, out, errOut := ctl("start", "--dir", dir, "--json", "--", os.Args[0], "-test.run=^$")
	require.Equal(t, exitOK, code, errOut)
	var rec runnerstate.Record
	require.NoError(t, json.Unmarshal([]byte(out), &rec))
	assert.True(t, rec.Ready)
	assert.Equal(t, `"ctl-test"`, string(rec.Meta))

	code, out, errOut = ctl("start", "--dir", dir, "--", "/nonexistent/never-started")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "pid "+strconv.Itoa(rec.PID))

	code, out, _ = ctl("status", "--dir", dir)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "ready")
	assert.Contains(t, out, "yes")
}

// Case: a runner that dies before it is ready: exit 1, with its log tail.
func TestStartFailurePrintsTheLogTail(t *testing.T) {
	dir := testharness.TempDir(t)
	t.Setenv(envRunner, dir)
	t.Setenv(envRunnerDie, "3")
	code, _, errOut := ctl("start", "--dir", dir, "--", os.Args[0], "-test.run=^$")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "status 3")
	assert.Contains(t, errOut, "runner.log")
	assert.Contains(t, errOut, "boom")

	// A second failure holds every start back: status says how many in a
	// row, and how the last one ended.
	code, _, errOut = ctl("start", "--dir", dir, "--", os.Args[0], "-test.run=^$")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "2 consecutive failed starts: no runner is started before")
	code, out, _ := ctl("status", "--dir", dir)
	assert.Equal(t, exitNotRunning, code)
	assert.Contains(t, out, "start failures  2 in a row")
	assert.Contains(t, out, "last exit       pid ")
	assert.Contains(t, out, "| boom")
}

// Case: usage errors exit 2: no command, an unknown flag.
func TestStartUsage(t *testing.T) {
	dir := testharness.TempDir(t)
	code, _, errOut := ctl("start", "--dir", dir)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--")
	code, _, _ = ctl("start", "--dir", dir, "--later", "--", "true")
	assert.Equal(t, exitUsage, code)
	code, out, _ := ctl("start", "--help")
	assert.Equal(t, exitOK, code)
	assert.True(t, strings.Contains(out, "exit codes: 0 a runner is ready"), out)
}
