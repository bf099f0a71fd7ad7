//go:build linux

package runnerstate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// Start's tests, one or more per point of its contract, each named for what
// it checks (TestStart...), with real processes: the command Start starts is this
// test binary playing "started-runner", which takes the directory with
// Takeover and publishes as a runner does; what it does besides is set by
// its environment (envStartMode).

const (
	envStartMode   = "RUNNERSTATE_TEST_START_MODE"   // ready (default), slow, never, linger, leave-slowly, die:N, kill, refuse-takeover
	envStartMeta   = "RUNNERSTATE_TEST_START_META"   // the Meta it publishes, a JSON string
	envStartReport = "RUNNERSTATE_TEST_START_REPORT" // a file it writes what it sees of itself into
)

func init() {
	registerRole("started-runner", roleStartedRunner)
	registerRole("start-caller", roleStartCaller)
	registerRole("notify-runner", roleNotifyRunner)
	registerRole("unpublished-holder", roleUnpublishedHolder)
	registerRole("chaos-start-caller", roleChaosStartCaller)
}

// unpublished-holder: Acquire dir and never Publish; say "acquired", hold
// until stdin closes.
func roleUnpublishedHolder(dir string) int {
	release, err := Acquire(dir)
	if err != nil {
		say("error %v", err)
		return 1
	}
	say("acquired")
	return holdUntilClosed(release)
}

// spawnsName is the state file each started-runner appends its pid to.
const spawnsName = "spawns"

// toldName is the file a "leave-slowly" started-runner creates once
// WatchRestart has told it to go.
const toldName = "told"

// started-runner: the runner Start starts. It appends its pid to spawns,
// writes its report when asked, then, per its mode: "die:N" prints "boom N"
// to stderr once the file "go" exists in dir and exits N; "kill" kills
// itself with SIGKILL; otherwise Takeover, and "slow" waits for "go" before
// its Publish, "never" never publishes. It runs until a restart request or
// SIGTERM; "linger" then lets go of the directory and lives on until the
// file "gone" exists in dir, as a runner that cleans up after its release;
// "leave-slowly" holds the directory until then, as a runner that drains.
func roleStartedRunner(dir string) int {
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	mode := os.Getenv(envStartMode)
	self, _ := json.Marshal(Self())
	if err := AppendLine(dir, spawnsName, string(self)); err != nil {
		fmt.Fprintln(os.Stderr, "append:", err)
		return 1
	}
	fmt.Println("started", os.Getpid())
	startWitness("spawned", readiness.attempt, Self())
	if report := os.Getenv(envStartReport); report != "" {
		writeStartReport(report)
	}
	waitFor := func(name string) {
		deadline := time.Now().Add(childWait)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitGo := func() { waitFor("go") }
	switch {
	case strings.HasPrefix(mode, "die:"):
		waitGo()
		code, _ := strconv.Atoi(strings.TrimPrefix(mode, "die:"))
		fmt.Fprintln(os.Stderr, "boom", code)
		return code
	case mode == "kill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	defer cancel()
	release, err := Takeover(ctx, dir, TakeoverOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "takeover:", err)
		return 1
	}
	defer release()
	if mode == "slow" {
		waitGo()
	}
	if mode != "never" {
		rec := Record{}
		if m := os.Getenv(envStartMeta); m != "" {
			rec.Meta, _ = json.Marshal(m)
		}
		// Stamped before: Start may return the record the instant it is
		// in place, before Publish has returned.
		startWitness("publishing", monoNow(), Self())
		if err := Publish(dir, rec); err != nil {
			fmt.Fprintln(os.Stderr, "publish:", err)
			return 1
		}
	}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	select {
	case <-WatchRestart(wctx, dir):
		if mode == "leave-slowly" {
			os.WriteFile(filepath.Join(dir, toldName), nil, 0o600)
		}
	case <-terms:
	}
	switch mode {
	case "linger":
		release()
		waitFor("gone")
	case "leave-slowly":
		waitFor("gone")
	}
	return 0
}

// startReport is what a started-runner sees of itself.
type startReport struct {
	PID, SID, PGID int
	FDs            map[string]string // /proc/self/fd targets
	Env            []string
}

func writeStartReport(path string) {
	r := startReport{PID: os.Getpid(), PGID: syscall.Getpgrp(), FDs: map[string]string{}, Env: os.Environ()}
	r.SID, _ = unix.Getsid(0)
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			r.FDs[e.Name()] = target
		}
	}
	data, _ := json.Marshal(r)
	os.WriteFile(path+".tmp", data, 0o644)
	os.Rename(path+".tmp", path)
}

// start-caller: calls Start on dir with the started-runner command (its
// environment passes the mode on), and says "ready <pid>" or "failed <pid>
// <exit code>" or "error <err>"; then holds until stdin closes.
func roleStartCaller(dir string) int {
	say("calling")
	rec, err := Start(context.Background(), dir, startedRunner(dir, os.Getenv(envStartMode)), StartOptions{})
	var se *StartError
	switch {
	case err == nil:
		say("ready %d", rec.PID)
	case errors.As(err, &se):
		say("failed %d %d", se.PID, se.ExitCode)
	default:
		say("error %v", err)
	}
	for range commands() {
	}
	return 0
}

// startedRunner is the command that plays started-runner in dir with mode.
func startedRunner(dir, mode string, env ...string) *exec.Cmd {
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"=started-runner", envStartMode+"="+mode, "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// stopStarted stops, when the test ends, every process Start started in dir
// (it names them in spawns), and waits until this process has reaped those
// it started.
func stopStarted(t *testing.T, dir string) {
	t.Cleanup(func() { killStarted(t, dir) })
}

// killStarted stops now every process Start started in dir, and waits
// until this process has reaped those it started.
func killStarted(t *testing.T, dir string) {
	ids := spawnedIDs(dir)
	if a, ok := readAttempt(dir); ok {
		ids = append(ids, Identity(a.Child))
	}
	for _, id := range ids {
		if p, _, _ := liveness.Pin(liveness.Identity(id)); p != nil {
			p.Signal(liveness.SIGKILL)
			ctx, cancel := context.WithTimeout(context.Background(), childWait)
			p.Wait(ctx)
			cancel()
			p.Close()
		}
	}
	eventually(t, "the started processes are reaped", func() bool { return reaped(dir) })
}

// The package reaps what it started: once the runner exits, no zombie, no
// descriptor and no goroutine is left (the reaper, internal/spawn.reap, and
// the readiness reader, internal/spawn.awaitReady, live only while it does).
func TestStartLeavesNoZombieNorLeak(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	cycle := func() int {
		rec, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
		require.NoError(t, err)
		require.NoError(t, RequestRestart(dir, RestartNow))
		eventually(t, "the runner is reaped", func() bool { return reaped(dir) })
		return rec.PID
	}
	cycle() // warm up what a process opens once (its inotify instance)
	before := openFDs(t)
	pid := cycle()
	_, err := liveness.Lookup(pid)
	assert.ErrorIs(t, err, liveness.ErrNoProcess, "no zombie is left")
	assert.Empty(t, leakedFDs(before, openFDs(t)), "descriptors left open")
	goleak.VerifyNone(t)
}

// spawnedIDs are the identities of the started-runners that ran in dir.
func spawnedIDs(dir string) []Identity {
	lines, _ := LoadLines(dir, spawnsName)
	var ids []Identity
	for _, l := range lines {
		var id Identity
		if json.Unmarshal([]byte(l), &id) == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// spawns are the pids of the started-runners that ran in dir.
func spawns(t *testing.T, dir string) []string {
	t.Helper()
	pids := []string{}
	for _, id := range spawnedIDs(dir) {
		pids = append(pids, strconv.Itoa(id.PID))
	}
	return pids
}

func startDir(t *testing.T) string {
	dir := tempDir(t)
	stopStarted(t, dir)
	return dir
}

// 1. Ready is a verified holder whose record says Ready; a runner admitted
// but not yet published is not ready yet, and Start waits for it.
func TestStartReadyIsPublishedNotAdmitted(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	done := make(chan struct{})
	var rec Record
	var err error
	go func() {
		defer close(done)
		rec, err = Start(background(t), dir, startedRunner(dir, "slow"), StartOptions{})
	}()
	// Admitted, not published: held, with a record that is not ready.
	eventually(t, "the started runner is admitted", func() bool {
		r, ok, _ := Running(dir)
		return ok && r.Process.PID != 0
	})
	admitted, ok, err2 := Running(dir)
	require.NoError(t, err2)
	require.True(t, ok)
	assert.False(t, admitted.Ready, "the record written at admission is not ready")
	select {
	case <-done:
		t.Fatal("Start returned before the runner published")
	default:
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	<-done
	require.NoError(t, err)
	assert.True(t, rec.Ready)
	assert.Equal(t, admitted.PID, rec.PID)
	assert.Len(t, spawns(t, dir), 1, "one process started")
	r, err := Status(dir)
	require.NoError(t, err)
	assert.True(t, r.Holder.Ready)
}

// An older runner's admission placeholder (no ready field, nothing of its
// own) in a held directory is not ready for Running, nor for Start's
// probe; the same runner's record with Specs is.
func TestStartOlderPlaceholderIsNotReady(t *testing.T) {
	dir := tempDir(t)
	holder := startChild(t, "unpublished-holder", dir)
	holder.Expect("acquired")
	line, err := os.ReadFile(filepath.Join(dir, LockName))
	require.NoError(t, err)
	id, ok := parseLockContent(line)
	require.True(t, ok, "the holder's identity in %s", line)
	write := func(extra string) {
		idJSON, err := json.Marshal(id)
		require.NoError(t, err)
		rec := fmt.Sprintf(`{"pid":%d,"process":%s,"started_at":"2026-01-02T03:04:05Z"%s}`, id.PID, idJSON, extra)
		require.NoError(t, os.WriteFile(filepath.Join(dir, RecordName), []byte(rec+"\n"), 0o644))
	}

	write("")
	rec, held, err := Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.Equal(t, id.PID, rec.PID, "the placeholder names the holder")
	assert.False(t, rec.Ready, "a placeholder is not ready")
	_, _, ready, err := probeStart(dir)
	require.NoError(t, err)
	assert.False(t, ready, "Start would wait for it")

	write(`,"specs":["older"]`)
	rec, _, err = Running(dir)
	require.NoError(t, err)
	assert.True(t, rec.Ready, "an older runner's record with Specs is its published one")
	_, _, ready, err = probeStart(dir)
	require.NoError(t, err)
	assert.True(t, ready)
}

// 2. A ready runner that Accept accepts: Start returns its record, locks
// nothing, writes nothing, starts nothing.
func TestStartFastPathTouchesNothing(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	runner := startChild(t, "runner", dir)
	runner.Expect("acquired")
	before := dirListing(t, dir)
	cmd := exec.Command(filepath.Join(dir, "never-run"))
	rec, err := Start(background(t), dir, cmd, StartOptions{})
	require.NoError(t, err)
	assert.Equal(t, runner.PID(), rec.PID)
	assert.True(t, rec.Ready)
	assert.Nil(t, cmd.Process)
	assert.Equal(t, before, dirListing(t, dir), "the fast path wrote nothing")
	_, err = os.Stat(filepath.Join(dir, startLockName))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func dirListing(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	m := map[string]string{}
	for _, e := range entries {
		fi, err := e.Info()
		require.NoError(t, err)
		m[e.Name()] = fmt.Sprintf("%d %v", fi.Size(), fi.ModTime().UnixNano())
	}
	return m
}

// 3. Concurrent Starts from several processes share one attempt: exactly
// one process is started, and every caller gets the same ready record; a
// failed attempt's failure is shared too, with the same pid and status.
func TestStartOneSpawnPerAttempt(t *testing.T) {
	captureLog(t)
	t.Run("ready", func(t *testing.T) {
		dir := startDir(t)
		callers := startCallers(t, dir, "slow", 4)
		var wg sync.WaitGroup
		results := make([]string, 4)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, err := Start(background(t), dir, startedRunner(dir, "slow"), StartOptions{})
				if err != nil {
					results[i] = err.Error()
					return
				}
				results[i] = "ready " + strconv.Itoa(rec.PID)
			}()
		}
		eventually(t, "the runner is started", func() bool { lines, _ := LoadLines(dir, spawnsName); return len(lines) > 0 })
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
		wg.Wait()
		pids := spawns(t, dir)
		require.Len(t, pids, 1, "exactly one process started")
		for _, c := range callers {
			assert.Equal(t, pids[0], c.Expect("ready"), "a caller process")
		}
		for _, r := range results {
			assert.Equal(t, "ready "+pids[0], r)
		}
	})
	t.Run("failed", func(t *testing.T) {
		dir := startDir(t)
		var se *StartError
		errs := make(chan error, 1)
		go func() {
			_, err := Start(background(t), dir, startedRunner(dir, "die:7"), StartOptions{})
			errs <- err
		}()
		eventually(t, "this process started the runner", func() bool { return !reaped(dir) })
		callers := startCallers(t, dir, "die:7", 3)
		// Each caller waits on the attempt (it has the runner pinned, or
		// is probing it) before the runner may die: a caller that came
		// after its death would rightly make an attempt of its own.
		for _, c := range callers {
			eventually(t, "a caller waits on the attempt", func() bool { return hasPidfd(c.PID()) })
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
		err := <-errs
		require.ErrorAs(t, err, &se)
		pids := spawns(t, dir)
		require.Len(t, pids, 1, "exactly one process started")
		assert.Equal(t, pids[0], strconv.Itoa(se.PID))
		assert.Equal(t, 7, se.ExitCode)
		for _, c := range callers {
			assert.Equal(t, pids[0]+" 7", c.Expect("failed"), "a caller process")
		}
		// A later call makes a new attempt.
		require.NoError(t, os.Remove(filepath.Join(dir, "go")))
		ctx, cancel := context.WithTimeout(background(t), 100*time.Millisecond)
		defer cancel()
		_, err = Start(ctx, dir, startedRunner(dir, "die:7"), StartOptions{})
		require.ErrorAs(t, err, &se)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotEqual(t, pids[0], strconv.Itoa(se.PID), "a new attempt")
		eventually(t, "the new attempt's process runs", func() bool { return len(spawnedIDs(dir)) == 2 })
	})
}

// hasPidfd reports whether process pid has a pidfd open: a caller of Start
// that waits on an attempt has its process pinned.
func hasPidfd(pid int) bool {
	entries, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, e := range entries {
		if target, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + e.Name()); target == "anon_inode:[pidfd]" {
			return true
		}
	}
	return false
}

// startCallers starts n start-caller processes on dir and waits until each
// has said it is calling Start.
func startCallers(t *testing.T, dir, mode string, n int) []*child {
	var cs []*child
	for range n {
		cmd := testharness.Command(dir)
		cmd.Env = append(os.Environ(), envStartMode+"="+mode)
		c := startChildCmd(t, cmd, "start-caller")
		c.Expect("calling")
		cs = append(cs, c)
	}
	return cs
}

// 4. The started process is detached: a session of its own, stdin from
// /dev/null, output appended to the log (0600), none of the caller's
// descriptors but ExtraFiles and the readiness descriptor (even one opened
// without close-on-exec), no NOTIFY_SOCKET; the caller's SysProcAttr fields
// that would tie it are cleared; it outlives its caller.
func TestStartDetached(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	leakyPath := filepath.Join(dir, "leaky")
	require.NoError(t, os.WriteFile(leakyPath, nil, 0o644))
	leaky, err := syscall.Open(leakyPath, syscall.O_RDONLY, 0) // no O_CLOEXEC
	require.NoError(t, err)
	defer syscall.Close(leaky)
	extra, err := os.Create(filepath.Join(dir, "extra"))
	require.NoError(t, err)
	defer extra.Close()
	report := filepath.Join(dir, "report.json")
	cmd := startedRunner(dir, "ready", envStartReport+"="+report, "NOTIFY_SOCKET=/run/some-unit.sock")
	cmd.ExtraFiles = []*os.File{extra}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: true, Setctty: true, Pdeathsig: 0}
	rec, err := Start(background(t), dir, cmd, StartOptions{})
	require.NoError(t, err)
	data, err := os.ReadFile(report)
	require.NoError(t, err)
	var r startReport
	require.NoError(t, json.Unmarshal(data, &r))
	assert.Equal(t, rec.PID, r.PID)
	assert.Equal(t, r.PID, r.SID, "a session of its own")
	assert.Equal(t, r.PID, r.PGID, "its own process group")
	assert.Equal(t, os.DevNull, r.FDs["0"])
	logPath := filepath.Join(dir, logName)
	assert.Equal(t, logPath, r.FDs["1"])
	assert.Equal(t, logPath, r.FDs["2"])
	assert.Equal(t, filepath.Join(dir, "extra"), r.FDs["3"], "ExtraFiles are passed")
	for fd, target := range r.FDs {
		assert.NotEqual(t, leakyPath, target, "the caller's descriptor %s leaked into the runner as %s", fd)
	}
	for _, kv := range r.Env {
		assert.False(t, strings.HasPrefix(kv, "NOTIFY_SOCKET="), "NOTIFY_SOCKET is removed")
		assert.False(t, strings.HasPrefix(kv, "RUNNERSTATE_READY_"), "the readiness variables are taken out of the runner's environment")
	}
	assert.True(t, cmd.SysProcAttr.Setsid)
	assert.False(t, cmd.SysProcAttr.Setpgid || cmd.SysProcAttr.Foreground || cmd.SysProcAttr.Setctty)
	fi, err := os.Stat(logPath)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	logData, err := os.ReadFile(logPath)
	require.NoError(t, err)
	assert.Contains(t, string(logData), "started "+strconv.Itoa(rec.PID))

	t.Run("outlives its caller", func(t *testing.T) {
		dir := startDir(t)
		caller := startCallers(t, dir, "ready", 1)[0]
		pid := caller.Expect("ready")
		caller.Kill()
		caller.Wait()
		rec, ok, err := Running(dir)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, pid, strconv.Itoa(rec.PID))
		assert.True(t, rec.Ready)
	})
}

// 5. The started process takes the directory itself (Takeover) and
// publishes; Start returns that record, woken by the readiness descriptor.
// A held holder that cannot be verified is not ready yet: Start waits for
// it, starting nothing, until ctx ends.
func TestStartRunnerTakesDirItself(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	rec, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err)
	assert.True(t, rec.Ready)
	pids := spawns(t, dir)
	require.Len(t, pids, 1)
	assert.Equal(t, pids[0], strconv.Itoa(rec.PID))
	assert.Equal(t, rec.PID, rec.Process.PID)
	assert.NotEmpty(t, rec.Process.Instance, "published by the runner itself")

	t.Run("holder that never publishes", func(t *testing.T) {
		dir := startDir(t)
		holder := startChild(t, "unpublished-holder", dir)
		holder.Expect("acquired")
		ctx, cancel := context.WithTimeout(background(t), 150*time.Millisecond)
		defer cancel()
		_, err := Start(ctx, dir, startedRunner(dir, "ready"), StartOptions{})
		var se *StartError
		require.ErrorAs(t, err, &se)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Empty(t, spawns(t, dir), "nothing started while a holder is not ready yet")
	})
}

// 6. A started process that exits before it is ready: a *StartError with
// its exit status (128+n for signal n) and only this attempt's log lines;
// nothing is left held.
func TestStartDiesBeforeReady(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, logName), []byte("an older runner's line\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	_, err := Start(background(t), dir, startedRunner(dir, "die:3"), StartOptions{})
	var se *StartError
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, ErrStartFailed)
	assert.Equal(t, 3, se.ExitCode)
	assert.NotZero(t, se.PID)
	assert.Equal(t, filepath.Join(dir, logName), se.Log)
	assert.Contains(t, se.LogTail, "boom 3")
	assert.NotContains(t, se.LogTail, "older runner")
	assert.Contains(t, se.Error(), dir)
	assert.Contains(t, se.Error(), strconv.Itoa(se.PID))
	assert.Contains(t, se.Error(), "exited with status 3 before it was ready")
	assert.NotContains(t, se.Error(), "exit status 3", "the status is said once")
	_, ok, err := Running(dir)
	require.NoError(t, err)
	assert.False(t, ok, "nothing is left held")

	// A command that exits 0 before the runner is ready (it left the
	// runner in the background, say) is told it is not what Start waits for.
	_, err = Start(background(t), dir, startedRunner(dir, "die:0"), StartOptions{})
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 0, se.ExitCode)
	assert.Contains(t, se.Error(), "exited with status 0 before it was ready (Start waits for the process it starts")

	_, err = Start(background(t), dir, startedRunner(dir, "kill"), StartOptions{})
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 128+int(syscall.SIGKILL), se.ExitCode)
}

// 7. The context ends first: a *StartError wrapping ctx.Err() and naming
// the pid; the process is left running, and a later Start waits for it.
func TestStartContextEndsFirst(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	ctx, cancel := context.WithTimeout(background(t), 100*time.Millisecond)
	defer cancel()
	_, err := Start(ctx, dir, startedRunner(dir, "slow"), StartOptions{})
	var se *StartError
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, -1, se.ExitCode)
	eventually(t, "the started process runs", func() bool { return len(spawnedIDs(dir)) == 1 })
	assert.Equal(t, []string{strconv.Itoa(se.PID)}, spawns(t, dir))
	id, err := liveness.Lookup(se.PID)
	require.NoError(t, err, "left running")
	v, _ := liveness.Check(id)
	assert.Equal(t, liveness.Alive, v)
	assert.NotContains(t, se.Error(), "ran no command of its own", "this call started it")

	// A later Start whose context ends first ran no command: it says whose
	// attempt it waited for, and how to end that one.
	short, cancelShort := context.WithTimeout(background(t), 50*time.Millisecond)
	defer cancelShort()
	_, err = Start(short, dir, startedRunner(dir, "slow"), StartOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "this call ran no command of its own")
	var waiter *StartError
	require.ErrorAs(t, err, &waiter)
	if waiter.PID != 0 {
		// It got as far as the attempt (where a loaded machine does not
		// end the context first, at start.lock or on the holder's
		// admission): it names it, and how to end it.
		assert.Contains(t, err.Error(), fmt.Sprintf("stop pid %d to start another", se.PID))
	}
	assert.NotContains(t, err.Error(), "the command could not be started")
	assert.Len(t, spawns(t, dir), 1)

	done := make(chan error, 1)
	var rec Record
	go func() {
		var err error
		rec, err = Start(background(t), dir, startedRunner(dir, "slow"), StartOptions{})
		done <- err
	}()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	require.NoError(t, <-done)
	assert.Equal(t, se.PID, rec.PID, "the later Start waited for the slow one")
	assert.Len(t, spawns(t, dir), 1)
}

// 7, the log: a start whose context ends first reports what the process
// wrote so far, as one that exits does (runnerctl start prints it).
func TestStartContextEndsFirstHasTheLogTail(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	said := filepath.Join(t.TempDir(), "said")
	ctx, cancel := context.WithCancel(background(t))
	defer cancel()
	cmd := exec.Command("sh", "-c", `echo I never publish; : >"$0"; exec sleep 3600`, said)
	errc := make(chan error, 1)
	go func() { _, err := Start(ctx, dir, cmd, StartOptions{}); errc <- err }()
	eventually(t, "the started process wrote its line", func() bool { _, err := os.Stat(said); return err == nil })
	cancel()
	err := <-errc
	var se *StartError
	require.ErrorAs(t, err, &se)
	t.Cleanup(func() {
		syscall.Kill(se.PID, syscall.SIGKILL)
		eventually(t, "the started process is reaped", func() bool { _, err := liveness.Lookup(se.PID); return err != nil })
	})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, -1, se.ExitCode)
	assert.Contains(t, se.LogTail, "I never publish")
	assert.NotContains(t, se.Error(), "exit status")
}

// 8. Accept refuses the ready runner: Start starts cmd, whose Takeover
// replaces the old one; refused again: a *StartError with ExitCode -1, the
// new runner left running, and no loop.
func TestStartAcceptReplacesRefused(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	metaIs := func(v string) func(Record) bool {
		return func(r Record) bool { return string(r.Meta) == strconv.Quote(v) }
	}
	v1, err := Start(background(t), dir, startedRunner(dir, "ready", envStartMeta+"=v1"), StartOptions{Accept: metaIs("v1")})
	require.NoError(t, err)
	v2, err := Start(background(t), dir, startedRunner(dir, "ready", envStartMeta+"=v2"), StartOptions{Accept: metaIs("v2")})
	require.NoError(t, err)
	assert.NotEqual(t, v1.PID, v2.PID)
	assert.Equal(t, `"v2"`, string(v2.Meta))
	_, err = Start(background(t), dir, startedRunner(dir, "ready", envStartMeta+"=v3"), StartOptions{Accept: metaIs("v4")})
	var se *StartError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, -1, se.ExitCode)
	assert.ErrorIs(t, err, errRefused)
	rec, ok, err := Running(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, se.PID, rec.PID, "the refused new runner is left running")
	assert.Len(t, spawns(t, dir), 3, "no loop")
}

// 9. Status shows the attempt in progress; a ctx already ended gets the
// fast path, then a *StartError wrapping ctx.Err().
func TestStartStatusShowsStarting(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	done := make(chan error, 1)
	go func() {
		_, err := Start(background(t), dir, startedRunner(dir, "slow"), StartOptions{})
		done <- err
	}()
	var starting Identity
	eventually(t, "Status shows the start", func() bool {
		r, err := Status(dir)
		starting = r.Starting
		return err == nil && r.Starting.PID != 0
	})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	require.NoError(t, <-done)
	assert.Equal(t, []string{strconv.Itoa(starting.PID)}, spawns(t, dir))
	r, err := Status(dir)
	require.NoError(t, err)
	assert.Zero(t, r.Starting, "Report.Starting empty once ready")
	data, err := json.Marshal(r)
	require.NoError(t, err)
	assert.NotContains(t, string(data), `"starting"`)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	rec, err := Start(ended, dir, exec.Command(filepath.Join(dir, "never-run")), StartOptions{})
	require.NoError(t, err, "the fast path is asked once")
	assert.Equal(t, starting.PID, rec.PID)
	other := tempDir(t)
	_, err = Start(ended, other, exec.Command(filepath.Join(dir, "never-run")), StartOptions{})
	var se *StartError
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, context.Canceled)
}

// 10. Bad input: a clear error at once, nothing created.
func TestStartBadInput(t *testing.T) {
	captureLog(t)
	base := tempDir(t)
	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	started := exec.Command("true")
	require.NoError(t, started.Run())
	notExec := filepath.Join(base, "not-executable")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	withBuffer := exec.Command("true")
	withBuffer.Stdout = &bytes.Buffer{}
	for _, tc := range []struct {
		name string
		dir  string
		cmd  *exec.Cmd
		want string
	}{
		{"nil cmd", filepath.Join(base, "a"), nil, "nil"},
		{"started cmd", filepath.Join(base, "b"), started, "started already"},
		{"dir is a file", file, exec.Command("true"), file},
		{"not in PATH", filepath.Join(base, "c"), exec.Command("runnerstate-no-such-command"), "runnerstate-no-such-command"},
		{"no such file", filepath.Join(base, "d"), exec.Command(filepath.Join(base, "missing")), filepath.Join(base, "missing")},
		{"stdout not a file", filepath.Join(base, "e"), withBuffer, "stdout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(background(t), tc.dir, tc.cmd, StartOptions{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "runnerstate: "), err.Error())
			if tc.dir != file {
				_, err := os.Stat(tc.dir)
				assert.ErrorIs(t, err, os.ErrNotExist, "nothing created")
			}
		})
	}
	t.Run("fails at exec", func(t *testing.T) {
		dir := filepath.Join(base, "f")
		_, err := Start(background(t), dir, exec.Command(notExec), StartOptions{})
		var se *StartError
		require.ErrorAs(t, err, &se)
		assert.Zero(t, se.PID)
		assert.ErrorIs(t, err, os.ErrPermission)
	})
	t.Run("log is a symlink", func(t *testing.T) {
		dir := filepath.Join(base, "g")
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.Symlink(file, filepath.Join(dir, logName)))
		_, err := Start(background(t), dir, exec.Command("true"), StartOptions{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), filepath.Join(dir, logName))
	})
}

// 11. NOTIFY_SOCKET: READY=1 and MAINPID in one datagram on the first
// Publish of the process, over a path socket and an abstract one; a send
// that fails is logged once and never fails Publish; nothing on release.
func TestStartNotifySocket(t *testing.T) {
	for _, abstract := range []bool{false, true} {
		t.Run(map[bool]string{false: "path", true: "abstract"}[abstract], func(t *testing.T) {
			dir := tempDir(t)
			name := filepath.Join(dir, "notify.sock")
			env := name
			if abstract {
				name = "\x00runnerstate-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				env = "@" + name[1:]
			}
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
			require.NoError(t, err)
			defer conn.Close()
			cmd := testharness.Command(dir)
			cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+env)
			runner := startChildCmd(t, cmd, "notify-runner")
			runner.Expect("published")
			buf := make([]byte, 4096)
			conn.SetReadDeadline(time.Now().Add(childWait))
			n, err := conn.Read(buf)
			require.NoError(t, err)
			assert.Equal(t, "READY=1\nMAINPID="+strconv.Itoa(runner.PID()), string(buf[:n]))
			runner.CloseStdin()
			runner.Expect("released")
			require.NoError(t, runner.Wait())
			// Nothing more: not for the second Publish, not on release.
			conn.SetReadDeadline(time.Now())
			_, err = conn.Read(buf)
			assert.True(t, errors.Is(err, os.ErrDeadlineExceeded), "no second datagram: %v", err)
		})
	}
	t.Run("send fails", func(t *testing.T) {
		dir := tempDir(t)
		cmd := testharness.Command(dir)
		cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+filepath.Join(dir, "nobody-listens.sock"))
		runner := startChildCmd(t, cmd, "notify-runner")
		assert.Equal(t, "1", runner.Expect("published warnings"))
		runner.CloseStdin()
		runner.Expect("released")
		require.NoError(t, runner.Wait())
	})
}

// notify-runner: Acquire dir, Publish twice, say "published warnings <n>"
// (n: the warnings about the service manager), release at EOF, say
// "released".
func roleNotifyRunner(dir string) int {
	var b testharness.LogBuffer
	SetLogger(slogText(&b))
	release, err := Acquire(dir)
	if err != nil {
		say("error %v", err)
		return 1
	}
	for range 2 {
		if err := Publish(dir, Record{}); err != nil {
			say("error %v", err)
			return 1
		}
	}
	say("published warnings %d", strings.Count(b.String(), "service manager"))
	for range commands() {
	}
	release()
	say("released")
	return 0
}

func slogText(b *testharness.LogBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// Chaos for the callers: callers in several processes call Start in a
// loop while a killer SIGKILLs the ready runner and the one being started,
// at random. Every started runner writes "spawned <attempt> <identity>" and
// "published <ns> <identity>" (CLOCK_MONOTONIC) into a witness file,
// O_APPEND, and every caller "returned <ns> <identity>" for each record
// Start gave it. The checker proves: never two processes started for one
// attempt; never a record returned that its holder had not published, ready,
// before the return.
func TestStartChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos takes seconds")
	}
	captureLog(t)
	dir := startDir(t)
	witness := filepath.Join(tempDir(t), "witness")
	callers := make([]*child, 4)
	for i := range callers {
		cmd := testharness.Command(dir)
		cmd.Env = append(os.Environ(), envStartMode+"=chaos", envStartWitness+"="+witness)
		callers[i] = startChildCmd(t, cmd, "chaos-start-caller")
		callers[i].Expect("calling")
	}
	// Three seconds of it, and longer on a slow machine until records were
	// returned between kills (never past childWait).
	begin := time.Now()
	kills := 0
	witnessed := func() bool {
		data, _ := os.ReadFile(witness)
		return strings.Count(string(data), "returned ") > 0
	}
	for time.Since(begin) < 3*time.Second || (kills < 3 || !witnessed()) && time.Since(begin) < childWait {
		time.Sleep(time.Duration(20+time.Now().UnixNano()%120) * time.Millisecond)
		var target Identity
		if rec, ok, _ := Running(dir); ok && rec.Process.PID != 0 {
			target = rec.Process
		} else if a, ok := readAttempt(dir); ok && a.pending() {
			target = Identity(a.Child)
		}
		if p, _, _ := liveness.Pin(liveness.Identity(target)); p != nil {
			if p.Signal(liveness.SIGKILL) == nil {
				kills++
			}
			p.Close()
		}
	}
	returned := 0
	for _, c := range callers {
		c.CloseStdin()
		n, err := strconv.Atoi(c.Expect("done"))
		require.NoError(t, err)
		returned += n
	}
	data, err := os.ReadFile(witness)
	require.NoError(t, err)
	spawned := map[string]Identity{}
	published := map[string]int64{} // identity key -> first publish
	key := func(id Identity) string { return fmt.Sprintf("%d/%d", id.PID, id.StartTicks) }
	var returns []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		stamp, idJSON, _ := strings.Cut(rest, " ")
		var id Identity
		require.NoError(t, json.Unmarshal([]byte(idJSON), &id), line)
		switch kind {
		case "spawned":
			prev, dup := spawned[stamp]
			assert.False(t, dup, "attempt %s started two processes: %v and %v", stamp, prev, id)
			spawned[stamp] = id
		case "publishing":
			ns, _ := strconv.ParseInt(stamp, 10, 64)
			if _, ok := published[key(id)]; !ok {
				published[key(id)] = ns
			}
		case "returned":
			returns = append(returns, line)
		}
	}
	for _, line := range returns {
		_, rest, _ := strings.Cut(line, " ")
		stamp, idJSON, _ := strings.Cut(rest, " ")
		var id Identity
		json.Unmarshal([]byte(idJSON), &id)
		ns, _ := strconv.ParseInt(stamp, 10, 64)
		p, ok := published[key(id)]
		assert.True(t, ok && p <= ns, "Start returned %v, which had not published before: %s", id, line)
	}
	t.Logf("%d attempts, %d published runners, %d records returned (%d witnessed), %d kills", len(spawned), len(published), returned, len(returns), kills)
	assert.Equal(t, returned, len(returns))
	assert.NotZero(t, returned)
	assert.NotZero(t, kills)
}

const envStartWitness = "RUNNERSTATE_TEST_WITNESS"

// startWitness appends one line to the witness file, in one write.
func startWitness(kind string, stamp any, id Identity) {
	path := os.Getenv(envStartWitness)
	if path == "" {
		return
	}
	data, _ := json.Marshal(id)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "%s %v %s\n", kind, stamp, data)
	f.Close()
}

func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// chaos-start-caller: say "calling", then call Start on dir in a loop from
// two goroutines until stdin closes, witnessing every record returned;
// then say "done <n>" (records returned).
func roleChaosStartCaller(dir string) int {
	say("calling")
	stop := make(chan struct{})
	go func() {
		for range commands() {
		}
		close(stop)
	}()
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				// NoBackoff: the killer also kills runners before they are
				// ready, which Start's backoff counts as failed starts; this
				// test is about one process per attempt and records
				// returned only once published (TestStartBackoff has the
				// backoff), so every call may start.
				rec, err := Start(ctx, dir, startedRunner(dir, "chaos", envStartWitness+"="+os.Getenv(envStartWitness)), StartOptions{NoBackoff: true})
				now := monoNow()
				cancel()
				if err == nil {
					if !rec.Ready {
						fmt.Fprintln(os.Stderr, "a record that is not ready")
						os.Exit(1)
					}
					startWitness("returned", now, rec.Process)
					mu.Lock()
					n++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	say("done %d", n)
	return 0
}

// 3. Each waiter applies its own Accept to the record the shared attempt
// produced: one that refuses it makes its own attempt, which replaces it.
func TestStartWaiterRefusesTheSharedRecord(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	metaIs := func(v string) func(Record) bool {
		return func(r Record) bool { return string(r.Meta) == strconv.Quote(v) }
	}
	v1 := make(chan error, 1)
	go func() {
		_, err := Start(background(t), dir, startedRunner(dir, "slow", envStartMeta+"=v1"), StartOptions{Accept: metaIs("v1")})
		v1 <- err
	}()
	eventually(t, "the v1 attempt is under way", func() bool { a, ok := readAttempt(dir); return ok && a.pending() })
	v2 := make(chan Record, 1)
	go func() {
		rec, err := Start(background(t), dir, startedRunner(dir, "ready", envStartMeta+"=v2"), StartOptions{Accept: metaIs("v2")})
		assert.NoError(t, err)
		v2 <- rec
	}()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	require.NoError(t, <-v1)
	rec := <-v2
	assert.Equal(t, `"v2"`, string(rec.Meta), "the waiter that refused v1 started its own")
	assert.Len(t, spawns(t, dir), 2)
}

// 10. Start's own files refused where they cannot be trusted: a symlink at
// start.lock or start.json is an error naming it, and nothing is started.
func TestStartSymlinkedStartFilesRefused(t *testing.T) {
	captureLog(t)
	for _, name := range []string{startLockName, startName} {
		t.Run(name, func(t *testing.T) {
			dir := startDir(t)
			target := filepath.Join(tempDir(t), "elsewhere")
			require.NoError(t, os.WriteFile(target, nil, 0o644))
			require.NoError(t, os.Symlink(target, filepath.Join(dir, name)))
			_, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), filepath.Join(dir, name))
			assert.Empty(t, spawns(t, dir))
		})
	}
}

// A runner Start started, once ready, ends its attempt: after it lets go of
// the directory, while it still lives (cleaning up), Status names no child
// (Report.Starting), and the next Start starts a new runner at once rather than wait
// for the lingering one to be ready again, then report it "exited before it
// was ready".
func TestStartAfterAReadyRunnerLetGo(t *testing.T) {
	dir := t.TempDir()
	stopStarted(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	defer cancel()
	first, err := Start(ctx, dir, startedRunner(dir, "linger"), StartOptions{})
	require.NoError(t, err)
	// Marked by its Publish, just after the record Start returned.
	eventually(t, "the ready runner marks its attempt", func() bool {
		a, ok := readAttempt(dir)
		return ok && a.Ready
	})

	require.NoError(t, RequestRestart(dir, RestartNow))
	eventually(t, "the first runner lets go", func() bool {
		_, held, _ := Running(dir)
		return !held
	})
	p, v, why := liveness.Pin(liveness.Identity(first.Process))
	require.NotNil(t, p, "the first runner lingers: %v (%s)", v, why)
	defer p.Close()
	r, err := Status(dir)
	require.NoError(t, err)
	assert.Zero(t, r.Starting, "no child in Report.Starting while the ready runner lingers")

	second, err := Start(ctx, dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err, "a new runner is started")
	assert.NotEqual(t, first.PID, second.PID)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gone"), nil, 0o600))
	require.NoError(t, RequestRestart(dir, RestartNow))
}

// A runner whose record was made unreadable under it (emptied, say) cannot
// be known ready: a Start whose context ends says so, and how to get out.
func TestStartSaysTheRecordCannotBeRead(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	first, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, RecordName), nil, 0o644))
	ctx, cancel := context.WithTimeout(background(t), 100*time.Millisecond)
	defer cancel()
	_, err = Start(ctx, dir, startedRunner(dir, "ready"), StartOptions{})
	var se *StartError
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, first.PID, se.PID, "the runner that runs is named")
	assert.Contains(t, err.Error(), "the runner's record "+filepath.Join(dir, RecordName)+" cannot be read")
	assert.Contains(t, err.Error(), "RequestRestart(dir, RestartNow)")
	assert.NotContains(t, err.Error(), "runnerctl", "not a tool of the examples")
	assert.Len(t, spawns(t, dir), 1, "nothing else was started")
}

// A ready runner that is asked to restart is leaving: Start does not hand it
// back, it waits for it to go and starts the next one.
func TestStartDoesNotReturnARunnerAskedToRestart(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	first, err := Start(background(t), dir, startedRunner(dir, "leave-slowly"), StartOptions{})
	require.NoError(t, err)
	require.NoError(t, RequestRestart(dir, RestartDrain))

	// While it drains, it is not handed back; a Start that ends first says
	// what it waited for, and started nothing.
	ctx, cancel := context.WithTimeout(background(t), 100*time.Millisecond)
	defer cancel()
	_, err = Start(ctx, dir, startedRunner(dir, "ready"), StartOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "asked to restart")
	assert.Len(t, spawns(t, dir), 1)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "gone"), nil, 0o600))
	second, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, first.PID, second.PID, "not the runner that was leaving")
	rec, held, err := Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.Equal(t, second.PID, rec.PID)
}

// A runner told to restart is leaving even when the request is withdrawn
// after it read it (the takeover that asked died): it drains on and then
// exits, so Start must not hand it out as ready while it does. Its record
// says so (Ready false, Leaving), Status shows it, and Start waits for it
// to go, then starts the next one.
func TestStartWaitsForALeavingRunnerWhoseRequestWasWithdrawn(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	first, err := Start(background(t), dir, startedRunner(dir, "leave-slowly"), StartOptions{})
	require.NoError(t, err)
	require.NoError(t, RequestRestart(dir, RestartDrain))
	eventually(t, "the runner is told to go", func() bool {
		_, err := os.Stat(filepath.Join(dir, toldName))
		return err == nil
	})
	require.NoError(t, ClearRestart(dir), "the request is withdrawn, as a takeover that dies withdraws its own")

	rec, held, err := Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.Equal(t, first.PID, rec.PID)
	assert.False(t, rec.Ready, "a leaving runner is not ready")
	assert.Equal(t, RestartDrain, rec.Leaving)
	r, err := Status(dir)
	require.NoError(t, err)
	assert.Empty(t, r.Restart, "no request is pending")
	assert.Equal(t, RestartDrain, r.Holder.Leaving, "Status shows it leaving")
	assert.False(t, r.Holder.Ready)

	ctx, cancel := context.WithTimeout(background(t), 100*time.Millisecond)
	defer cancel()
	_, err = Start(ctx, dir, startedRunner(dir, "ready"), StartOptions{})
	require.ErrorIs(t, err, context.DeadlineExceeded, "the leaving runner is not handed out")
	assert.Len(t, spawns(t, dir), 1, "nothing is started while it holds the directory")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "gone"), nil, 0o600))
	second, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, first.PID, second.PID, "not the runner that was leaving")
	assert.True(t, second.Ready)
	assert.Empty(t, second.Leaving)
}

// What a client of Start meets once it builds something real, each with
// real processes.

func init() { registerRole("env-runner", roleEnvRunner) }

// envReportName is the file an env-runner writes what its child finds.
const envReportName = "env-report"

// env-runner: append its pid to spawns, Takeover dir, then write into
// env-report the environment a child of it finds (env(1), one variable a
// line), then "cwd <dir>", "umask <octal>" and "attempt <n>" (the attempt
// that started it, as the package read it) of its own; Publish, and run
// until a restart request.
func roleEnvRunner(dir string) int {
	self, _ := json.Marshal(Self())
	if err := AppendLine(dir, spawnsName, string(self)); err != nil {
		fmt.Fprintln(os.Stderr, "append:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	defer cancel()
	release, err := Takeover(ctx, dir, TakeoverOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "takeover:", err)
		return 1
	}
	defer release()
	env, err := exec.Command("env").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "env:", err)
		return 1
	}
	cwd, _ := os.Getwd()
	report := fmt.Sprintf("%scwd %s\numask %s\nattempt %d\n", env, cwd, ownUmask(), readiness.attempt)
	if err := os.WriteFile(filepath.Join(dir, envReportName), []byte(report), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		return 1
	}
	if err := Publish(dir, Record{}); err != nil {
		fmt.Fprintln(os.Stderr, "publish:", err)
		return 1
	}
	<-WatchRestart(context.Background(), dir)
	return 0
}

// ownUmask is this process's umask, in octal, as /proc/self/status says it.
func ownUmask() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// The RUNNERSTATE_ variables Start adds reach the runner, which
// reads them, and never its own children; the runner keeps the caller's
// working directory and umask.
func TestStartVariablesDoNotReachTheRunnersChildren(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	cmd := roleCommand(dir, "env-runner")
	callers := map[string]bool{} // the caller's own RUNNERSTATE_ variables are passed on
	for _, kv := range cmd.Env {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "RUNNERSTATE_") {
			callers[name] = true
		}
	}
	old := syscall.Umask(0o027)
	_, err := Start(background(t), dir, cmd, StartOptions{})
	syscall.Umask(old)
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(dir, envReportName))
	require.NoError(t, err)
	cwd, err := os.Getwd()
	require.NoError(t, err)
	var leaked []string
	for _, line := range strings.Split(string(data), "\n") {
		if name, _, _ := strings.Cut(line, "="); strings.HasPrefix(name, "RUNNERSTATE_") && !callers[name] {
			leaked = append(leaked, line)
		}
	}
	assert.Empty(t, leaked, "variables Start added reached the runner's child")
	assert.Contains(t, string(data), "\ncwd "+cwd+"\n", "the caller's working directory")
	assert.Contains(t, string(data), "\numask 0027\n", "the caller's umask")
	a, ok := readAttempt(dir)
	require.True(t, ok)
	assert.Contains(t, string(data), fmt.Sprintf("\nattempt %d\n", a.Seq), "the runner itself learns its attempt, from the package")
	require.NoError(t, RequestRestart(dir, RestartNow))
}

// roleCommand is the command that plays role in dir, for Start.
func roleCommand(dir, role string) *exec.Cmd {
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"="+role, "GORACE=atexit_sleep_ms=0")
	return cmd
}

// A record that cannot be read under a verified holder makes Start
// return within about a second (here: well before a 20 s context) with an
// error that names the file, the holder's pid, and what the caller's
// program can do; nothing else is started.
func TestStartReturnsSoonOnAnUnreadableRecord(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	first, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, RecordName), []byte("{not json"), 0o644))
	ctx, cancel := context.WithTimeout(background(t), 20*time.Second)
	defer cancel()
	began := time.Now()
	_, err = Start(ctx, dir, startedRunner(dir, "ready"), StartOptions{})
	took := time.Since(began)
	require.Error(t, err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller's whole context was waited out")
	assert.Less(t, took, 10*time.Second)
	var se *StartError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, first.PID, se.PID, "the holder is named")
	assert.Contains(t, err.Error(), filepath.Join(dir, RecordName))
	assert.Contains(t, err.Error(), "pid "+strconv.Itoa(first.PID))
	assert.Contains(t, err.Error(), "RequestRestart(dir, RestartNow)")
	assert.NotContains(t, err.Error(), "runnerctl", "a tool the caller's program does not have")
	assert.Len(t, spawns(t, dir), 1, "nothing else was started")
}

// The error a failed start returns carries the last line its
// process wrote, so the cause is seen without opening the log.
func TestStartErrorSaysTheLastLine(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	cmd := exec.Command("sh", "-c", `echo starting; echo "listen unix /x/idx.sock: bind: invalid argument" >&2; echo; exit 1`)
	_, err := Start(background(t), dir, cmd, StartOptions{})
	var se *StartError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 1, se.ExitCode)
	assert.Contains(t, err.Error(), "listen unix /x/idx.sock: bind: invalid argument")
	assert.NotContains(t, err.Error(), "starting", "the last line only")
	assert.Contains(t, err.Error(), filepath.Join(dir, logName))
}

// Accept is asked once per distinct record the call sees: here the
// old runner, refused, and the new one, refused too.
func TestStartAsksAcceptOncePerRecord(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	old, err := Start(background(t), dir, startedRunner(dir, "ready", envStartMeta+"=v1"), StartOptions{})
	require.NoError(t, err)
	var mu sync.Mutex
	asked := map[int]int{}
	refuse := func(r Record) bool {
		mu.Lock()
		defer mu.Unlock()
		asked[r.PID]++
		return false
	}
	_, err = Start(background(t), dir, startedRunner(dir, "ready", envStartMeta+"=v2"), StartOptions{Accept: refuse})
	var se *StartError
	require.ErrorAs(t, err, &se)
	require.ErrorIs(t, err, errRefused)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[int]int{old.PID: 1, se.PID: 1}, asked, "asked once for each record")
}

// Start rotates a log over LogMaxBytes before it appends: Log →
// Log.1 → Log.2 → Log.3, the oldest dropped (here a symlink, replaced as a
// name, its target untouched); once per attempt however many callers share
// it.
func TestStartRotatesTheLog(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	log := filepath.Join(dir, logName)
	big := strings.Repeat("old line\n", 200) // 1800 bytes
	require.NoError(t, os.WriteFile(log, []byte(big), 0o600))
	require.NoError(t, os.WriteFile(log+".1", []byte("one\n"), 0o600))
	require.NoError(t, os.WriteFile(log+".2", []byte("two\n"), 0o600))
	outside := filepath.Join(tempDir(t), "outside")
	require.NoError(t, os.WriteFile(outside, []byte("not a log\n"), 0o600))
	require.NoError(t, os.Symlink(outside, log+".3"))

	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{LogMaxBytes: 1000})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, spawns(t, dir), 1)
	read := func(name string) string {
		data, err := os.ReadFile(name)
		require.NoError(t, err)
		return string(data)
	}
	assert.True(t, read(log+".1") == big, "the log over the bound is Log.1")
	assert.Equal(t, "one\n", read(log+".2"))
	fi, err := os.Lstat(log + ".3")
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the symlink at Log.3 was replaced, not followed")
	assert.Equal(t, "two\n", read(log+".3"))
	assert.Equal(t, "not a log\n", read(outside), "a symlink's target is never written")
	_, err = os.Lstat(log + ".4")
	assert.ErrorIs(t, err, os.ErrNotExist, "three are kept")
	assert.Contains(t, read(log), "started ", "the new runner's output")
	assert.NotContains(t, read(log), "old line")
	require.NoError(t, RequestRestart(dir, RestartNow))
	eventually(t, "the runner goes", func() bool { _, held, _ := Running(dir); return !held })

	t.Run("under the bound, or never", func(t *testing.T) {
		for _, max := range []int64{0, -1} {
			dir := startDir(t)
			log := filepath.Join(dir, logName)
			require.NoError(t, os.WriteFile(log, []byte(big), 0o600))
			_, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{LogMaxBytes: max})
			require.NoError(t, err)
			_, err = os.Lstat(log + ".1")
			assert.ErrorIs(t, err, os.ErrNotExist, "LogMaxBytes %d: not rotated", max)
			assert.True(t, strings.HasPrefix(read(log), big), "appended to")
			require.NoError(t, RequestRestart(dir, RestartNow))
		}
	})

	t.Run("the caller's own streams", func(t *testing.T) {
		dir := startDir(t)
		log := filepath.Join(dir, logName)
		require.NoError(t, os.WriteFile(log, []byte(big), 0o600))
		out, err := os.OpenFile(filepath.Join(dir, "own.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		require.NoError(t, err)
		defer out.Close()
		cmd := startedRunner(dir, "ready")
		cmd.Stdout, cmd.Stderr = out, out
		_, err = Start(background(t), dir, cmd, StartOptions{LogMaxBytes: 1000})
		require.NoError(t, err)
		_, err = os.Lstat(log + ".1")
		assert.ErrorIs(t, err, os.ErrNotExist, "a log Start did not open is left alone")
		require.NoError(t, RequestRestart(dir, RestartNow))
	})
}

// A runner whose record cannot be read while a restart request is pending
// for it is leaving, and Start waits for it to go, as for any runner asked
// to restart, rather than fail after a second.
func TestStartWaitsForALeavingRunnerWhoseRecordCannotBeRead(t *testing.T) {
	captureLog(t)
	dir := startDir(t)
	first, err := Start(background(t), dir, startedRunner(dir, "leave-slowly"), StartOptions{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, RecordName), []byte("{not json"), 0o644))
	require.NoError(t, RequestRestart(dir, RestartDrain))
	ctx, cancel := context.WithTimeout(background(t), 3*recordUnreadableFor)
	defer cancel()
	_, err = Start(ctx, dir, startedRunner(dir, "ready"), StartOptions{})
	assert.ErrorIs(t, err, context.DeadlineExceeded, "waited for the leaving runner until ctx ended")
	assert.Len(t, spawns(t, dir), 1, "nothing else was started")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "gone"), nil, 0o600))
	second, err := Start(background(t), dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, first.PID, second.PID)
}
