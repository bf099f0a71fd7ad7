//go:build linux

// Package examples_test plays the main job with the example programs as a
// user would: it builds examples/runner and examples/runnerctl and runs the
// main job's story with real processes and the examples' defaults: runner
// A; runner B takes over; restart --drain; runner C; restart --now; runner
// E killed -9; runner D admitted.
package examples_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// storyWait bounds every step of the story; reached only when it is broken.
const storyWait = 60 * time.Second

type story struct {
	t                 *testing.T
	bin, tmp, logs    string
	runner, runnerctl string
	exited            map[*exec.Cmd]chan struct{} // closed when the runner is reaped
}

func newStory(t *testing.T) *story {
	s := &story{t: t, bin: t.TempDir(), tmp: t.TempDir(), logs: t.TempDir(), exited: map[*exec.Cmd]chan struct{}{}}
	s.runner = filepath.Join(s.bin, "runner")
	s.runnerctl = filepath.Join(s.bin, "runnerctl")
	for _, p := range []struct{ out, pkg string }{{s.runner, "./runner"}, {s.runnerctl, "./runnerctl"}} {
		cmd := exec.Command("go", "build", "-o", p.out, p.pkg)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s: %s", p.pkg, out)
	}
	return s
}

// defaultDir is where the examples put app's directory by default when
// XDG_RUNTIME_DIR is unset and TMPDIR is tmp (examples/internal/demodir).
func defaultDir(tmp, app string) string {
	return filepath.Join(tmp, app+"-"+strconv.Itoa(os.Getuid()))
}

func (s *story) env() []string {
	return append(os.Environ(), "TMPDIR="+s.tmp, "XDG_RUNTIME_DIR=")
}

// start runs the runner with its defaults and args; it is killed and
// reaped at the end.
func (s *story) start(name string, args ...string) *exec.Cmd {
	log, err := os.Create(filepath.Join(s.logs, name+".log"))
	require.NoError(s.t, err)
	cmd := exec.Command(s.runner, args...)
	cmd.Env = s.env()
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(s.t, cmd.Start())
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	s.t.Cleanup(func() { cmd.Process.Kill(); <-done })
	s.exited[cmd] = done
	return cmd
}

// ctl runs runnerctl and returns its standard output; a failure's error
// carries its standard error too (errors.As still finds the *exec.ExitError).
func (s *story) ctl(args ...string) (string, error) {
	cmd := exec.Command(s.runnerctl, args...)
	cmd.Env = s.env()
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("runnerctl %s: %w; its stderr: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out.String(), nil
}

type report struct {
	Held     bool `json:"held"`
	Verified bool `json:"verified"`
	Holder   struct {
		PID int `json:"pid"`
	} `json:"holder"`
}

// waitHolder waits until `runnerctl status --json` names pid as the
// verified holder.
func (s *story) waitHolder(name string, pid int) {
	s.t.Helper()
	deadline := time.Now().Add(storyWait)
	for time.Now().Before(deadline) {
		out, err := s.ctl("status", "--json")
		var r report
		if err == nil && json.Unmarshal([]byte(out), &r) == nil && r.Held && r.Verified && r.Holder.PID == pid {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("runner %s (pid %d) never held the dir verified; its log:\n%s", name, pid, s.log(name))
}

// waitLog waits until runner name's log contains what.
func (s *story) waitLog(name, what string) {
	s.t.Helper()
	deadline := time.Now().Add(storyWait)
	for time.Now().Before(deadline) {
		if strings.Contains(s.log(name), what) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("runner %s never logged %q; its log:\n%s", name, what, s.log(name))
}

func (s *story) waitGone(name string, cmd *exec.Cmd) {
	s.t.Helper()
	select {
	case <-s.exited[cmd]:
	case <-time.After(storyWait):
		s.t.Fatalf("runner %s still alive after %v; its log:\n%s", name, storyWait, s.log(name))
	}
}

// startWithJob starts a runner that runs one job of an hour, and returns
// it and its job's pid once it holds the directory and the job runs
// (SIGUSR1 makes the job finish).
func (s *story) startWithJob(name string) (*exec.Cmd, int) {
	s.t.Helper()
	r := s.start(name, "-job", "1h", "-parallel", "1")
	s.waitHolder(name, r.Process.Pid)
	s.waitLog(name, "job started")
	m := regexp.MustCompile(`msg="job started".* pid=(\d+)`).FindStringSubmatch(s.log(name))
	require.NotNil(s.t, m, s.log(name))
	job, err := strconv.Atoi(m[1])
	require.NoError(s.t, err)
	return r, job
}

func (s *story) log(name string) string {
	data, _ := os.ReadFile(filepath.Join(s.logs, name+".log"))
	return string(data)
}

func TestMainJobStory(t *testing.T) {
	s := newStory(t)
	a := s.start("a")
	s.waitHolder("a", a.Process.Pid)

	t0 := time.Now()
	b := s.start("b")
	s.waitGone("a", a)
	s.waitHolder("b", b.Process.Pid)
	t1 := time.Now()
	require.Contains(t, s.log("a"), "restart requested", "A left because it was asked")
	require.Equal(t, 0, a.ProcessState.ExitCode())

	// A drain that arrives before b's first job would find nothing to let
	// finish: ask once a job runs (the holder is verified from its lock
	// file before it has published or started anything).
	s.waitLog("b", "job started")
	out, err := s.ctl("restart", "--drain")
	require.NoError(t, err, out)
	s.waitGone("b", b)
	t2 := time.Now()
	require.Contains(t, s.log("b"), "job finished", "drain lets the running job finish")
	require.Equal(t, 0, b.ProcessState.ExitCode())

	c := s.start("c")
	s.waitHolder("c", c.Process.Pid)
	t3 := time.Now()
	out, err = s.ctl("restart", "--now")
	require.NoError(t, err, out)
	s.waitGone("c", c)
	t4 := time.Now()

	// E's jobs outlast the story (with the default 2 s jobs they could end
	// by themselves before D is admitted, and D would have no orphan to
	// stop): they end only when D's takeover signals them.
	e := s.start("e", "-job", "1h")
	s.waitHolder("e", e.Process.Pid)
	s.waitLog("e", "job started")
	require.NoError(t, e.Process.Signal(syscall.SIGKILL))
	s.waitGone("e", e)
	// E's jobs are processes of its tree: they still hold the directory.
	out, err = s.ctl("status")
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, out)
	require.Equal(t, 75, ee.ExitCode(), "busy with orphans:\n%s", out)
	require.Contains(t, out, "orphans")
	_, err = s.ctl("clear-stale")
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 75, ee.ExitCode(), "clear-stale waits for the orphans")
	require.ErrorContains(t, err, "orphans of a previous one", "clear-stale says no runner runs, its orphans do")
	t5 := time.Now()
	d := s.start("d")
	s.waitHolder("d", d.Process.Pid)
	t6 := time.Now()
	require.NotContains(t, s.log("d"), "signalled the runner", "a dead runner is never signalled")
	require.Contains(t, s.log("d"), "signalled an orphan", "its jobs were stopped before D was admitted")

	// SIGTERM: a clean exit, 143.
	require.NoError(t, d.Process.Signal(syscall.SIGTERM))
	s.waitGone("d", d)
	require.Equal(t, 143, d.ProcessState.ExitCode())
	out, err = s.ctl("status")
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 3, ee.ExitCode(), "status exits 3 when no runner runs:\n%s", out)
	require.True(t, strings.Contains(out, "none"), "status after the story:\n%s", out)

	t.Logf("takeover %v, drain exit %v, now exit %v, admit after kill -9 %v",
		t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond),
		t4.Sub(t3).Round(time.Millisecond), t6.Sub(t5).Round(time.Millisecond))
}

// Case: `runner -mode drain` (no -grace) really drains: the runner already
// there finishes its running job, one longer than DefaultGrace, and is never
// signalled; then the new runner is admitted. The job ends when the test
// says so (SIGUSR1), once DefaultGrace has passed since the request.
func TestRunnerModeDrainDrains(t *testing.T) {
	s := newStory(t)
	a, job := s.startWithJob("a")

	b := s.start("b", "-mode", "drain")
	s.waitLog("b", "takeover asked the runner to restart")
	asked := time.Now()
	s.waitLog("a", "restart requested")
	// A drain cut by DefaultGrace would have been signalled by now.
	for time.Since(asked) < runnerstate.DefaultGrace+time.Second {
		select {
		case <-s.exited[a]:
			t.Fatalf("runner a exited before its job finished; its log:\n%s\nb's:\n%s", s.log("a"), s.log("b"))
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.NoError(t, syscall.Kill(job, syscall.SIGUSR1), "the job finishes")
	s.waitGone("a", a)
	s.waitHolder("b", b.Process.Pid)
	assert.Equal(t, 0, a.ProcessState.ExitCode())
	assert.Contains(t, s.log("a"), "job finished", "the drain let the job finish")
	assert.NotContains(t, s.log("a"), "job cancelled")
	assert.NotContains(t, s.log("a"), "signalled")
	assert.NotContains(t, s.log("b"), "signalled the runner", "a drain with no grace never signals")
}

func TestRunnerctl(t *testing.T) {
	s := newStory(t)
	out, err := s.ctl("status")
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 3, ee.ExitCode(), "no runner runs")
	require.Contains(t, out, "runner")
	require.Contains(t, out, "none")

	_, err = s.ctl("restart", "--now")
	require.ErrorAs(t, err, &ee, "nothing to restart")
	require.Equal(t, 3, ee.ExitCode())

	_, err = s.ctl("bogus")
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, ee.ExitCode())

	a := s.start("a")
	s.waitHolder("a", a.Process.Pid)
	out, err = s.ctl("clear-stale")
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 75, ee.ExitCode(), "refused: a runner is running\n%s", out)
	_, err = s.ctl("wait", "--timeout", "100ms")
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 75, ee.ExitCode())

	out, err = s.ctl("status")
	require.NoError(t, err)
	require.Contains(t, out, "verified alive")

	require.NoError(t, a.Process.Signal(syscall.SIGKILL))
	s.waitGone("a", a)
	out, err = s.ctl("wait", "--timeout", "10s")
	require.NoError(t, err, out)
	out, err = s.ctl("clear-stale")
	require.NoError(t, err, "wait said no runner and no orphan is left:\n%s", out)
	require.Contains(t, out, "cleared")
}

// waitNamed waits until `runnerctl status --json` names pid anywhere: as
// the holder (as soon as it holds the kernel lock) or as a waiting starter.
func (s *story) waitNamed(name string, pid int) {
	s.t.Helper()
	deadline := time.Now().Add(storyWait)
	want := `"pid": ` + strconv.Itoa(pid) + `,`
	for time.Now().Before(deadline) {
		if out, _ := s.ctl("status", "--json"); strings.Contains(out, want) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	s.t.Fatalf("status never named runner %s (pid %d); its log:\n%s", name, pid, s.log(name))
}

// Case (2 of 20 runners survived a SIGTERM sent the moment status named
// them): a runner SIGTERMed at any moment of its start (waiting, being
// admitted, admitted) stops, and exits as a terminated process does (143),
// never as refused (75) and never running on.
func TestRunnerStopsOnSIGTERMAtAnyMoment(t *testing.T) {
	s := newStory(t)
	for round := range 10 {
		name := "r" + strconv.Itoa(round)
		r := s.start(name)
		s.waitNamed(name, r.Process.Pid)
		require.NoError(t, r.Process.Signal(syscall.SIGTERM))
		s.waitGone(name, r)
		require.Equal(t, 143, r.ProcessState.ExitCode(), "round %d; the runner's log:\n%s", round, s.log(name))
	}
	out, _ := s.ctl("status", "--json")
	var r report
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.False(t, r.Held, "no runner is left:\n%s", out)
}

// Case: a runner SIGTERMed while it waits to be admitted (a holder it may not
// signal: flock(1) on runner.lock) exits 143, not 75, and takes back its
// waiting mark and its restart request.
func TestRunnerSIGTERMWhileWaiting(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) (util-linux) is not installed")
	}
	s := newStory(t)
	dir := defaultDir(s.tmp, "runnerstate-demo")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	holder := exec.Command("flock", filepath.Join(dir, "runner.lock"), "sh", "-c", "echo locked; exec sleep 600")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	locked, err := holder.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, holder.Start())
	t.Cleanup(func() { syscall.Kill(-holder.Process.Pid, syscall.SIGKILL); holder.Wait() })
	line, err := bufio.NewReader(locked).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line, "flock(1) holds runner.lock")
	r := s.start("r")
	deadline := time.Now().Add(storyWait)
	for {
		out, _ := s.ctl("status", "--json")
		var st struct {
			Waiting []struct {
				PID int `json:"pid"`
			} `json:"waiting"`
			Restart string `json:"restart"`
		}
		if json.Unmarshal([]byte(out), &st) == nil && len(st.Waiting) == 1 && st.Waiting[0].PID == r.Process.Pid && st.Restart != "" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the runner never waited; its log:\n%s", s.log("r"))
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, r.Process.Signal(syscall.SIGTERM))
	s.waitGone("r", r)
	require.Equal(t, 143, r.ProcessState.ExitCode(), "the runner's log:\n%s", s.log("r"))
	out, _ := s.ctl("status", "--json")
	assert.Contains(t, out, `"waiting": []`)
	assert.Contains(t, out, `"restart": ""`)
}

// A runner that is leaving is never handed out as ready: a takeover asks a
// draining runner to drain and then is stopped (SIGTERM), withdrawing its
// request; the runner drains on. Meanwhile status shows it leaving, and
// runnerctl start waits for it to go, then starts a new runner.
func TestLeavingRunnerIsNotHandedOutAsReady(t *testing.T) {
	s := newStory(t)
	a, job := s.startWithJob("a")

	b := s.start("b", "-mode", "drain")
	s.waitLog("a", "restart requested")
	require.NoError(t, b.Process.Signal(syscall.SIGTERM))
	s.waitGone("b", b)

	out, err := s.ctl("status")
	require.NoError(t, err)
	assert.Regexp(t, `ready\s+no: leaving \(drain\)`, out)
	assert.Regexp(t, `restart\s+none`, out, "the takeover withdrew its request")

	// runnerctl start waits while a drains, then starts its command.
	dir := defaultDir(s.tmp, "runnerstate-demo")
	start := exec.Command(s.runnerctl, "start", "--json", "--timeout", "60s", "--", s.runner, "-job", "1h")
	start.Env = s.env()
	var stdout, stderr bytes.Buffer
	start.Stdout, start.Stderr = &stdout, &stderr
	require.NoError(t, start.Start())
	done := make(chan error, 1)
	go func() { done <- start.Wait() }()
	t.Cleanup(func() {
		start.Process.Kill()
		// The runner started asked to stop now cancels its jobs (SIGTERM)
		// and waits for them; then the directory is free.
		runnerstate.RequestRestart(dir, runnerstate.RestartNow)
		s.ctl("wait", "--timeout", "60s")
	})
	select {
	case err := <-done:
		t.Fatalf("runnerctl start returned while the old runner drained (%v): %s %s", err, stdout.String(), stderr.String())
	case <-time.After(300 * time.Millisecond): // no answer yet is the point; any wait would do
	}
	require.NoError(t, syscall.Kill(job, syscall.SIGUSR1), "the job finishes, and the drain with it")
	s.waitGone("a", a)
	select {
	case err := <-done:
		require.NoError(t, err, "%s", stderr.String())
	case <-time.After(storyWait):
		t.Fatalf("runnerctl start never returned: %s", stderr.String())
	}
	var rec runnerstate.Record
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rec), stdout.String())
	assert.NotEqual(t, a.Process.Pid, rec.PID, "a new runner, not the one that left")
	assert.True(t, rec.Ready)
}
