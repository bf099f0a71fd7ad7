package compat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// releases are the earlier releases whose builds the current code must
// hand a directory over to, and take it over from, oldest first. Every
// later release adds its commit here (docs/protocol.md).
var releases = []release{
	{name: "v0.2", commit: "5da114b"},
	{name: "v0.3", commit: "47a8404"},
	{name: "v0.4", commit: "c009845", daemon: true},
}

// release is an earlier release's name and commit; daemon says it has
// package daemon (v0.4 on), whose servers play the lingering cells.
type release struct {
	name, commit string
	daemon       bool
}

// envCompat runs the test; without it, it is skipped.
const envCompat = "RUNNERSTATE_COMPAT"

// build is examples/runner and examples/runnerctl of one tree, and its
// server of package daemon (daemonProgram) where the tree has the package.
type build struct {
	name, runner, ctl, daemon string
}

// TestCompat plays the current build against each release's, both ways,
// and prints the matrix, one line per cell.
func TestCompat(t *testing.T) {
	if os.Getenv(envCompat) != "1" {
		t.Skipf("set %s=1 to build examples/runner and examples/runnerctl from %s and play them against this tree (about a minute or two)", envCompat, releaseList())
	}
	began := time.Now()
	root := gitRoot(t)
	bins := t.TempDir()
	cur := buildTree(t, "current", root, bins)
	cur.daemon = buildDaemon(t, root, true)
	var olds []build
	for _, r := range releases {
		src := exportCommit(t, root, r, t.TempDir())
		b := buildTree(t, r.name, src, bins)
		if r.daemon {
			b.daemon = buildDaemon(t, src, false)
		}
		olds = append(olds, b)
	}
	built := time.Since(began)

	m := &matrix{}
	for _, old := range olds {
		for _, way := range [][2]build{{old, cur}, {cur, old}} {
			a, b := way[0], way[1]
			m.cell(t, fmt.Sprintf("takeover now    %s -> %s", a.name, b.name), func(t *testing.T) { takeover(t, a, b, runnerstate.RestartNow) })
			m.cell(t, fmt.Sprintf("takeover drain  %s -> %s", a.name, b.name), func(t *testing.T) { takeover(t, a, b, runnerstate.RestartDrain) })
			m.cell(t, fmt.Sprintf("kill -9, jobs   %s -> %s", a.name, b.name), func(t *testing.T) { killedWithJobs(t, a, b) })
		}
		m.cell(t, fmt.Sprintf("race            %s then %s (holder current): one admitted, gate sound, %s's rewrite keeps the waiting current", old.name, cur.name, old.name),
			func(t *testing.T) { race(t, cur, old, cur) })
		m.cell(t, fmt.Sprintf("race            %s then %s (holder %s): one admitted, gate sound", cur.name, old.name, old.name),
			func(t *testing.T) { race(t, old, cur, old) })
		m.cell(t, fmt.Sprintf("start           current runnerctl start of a %s runner: never its placeholder", old.name),
			func(t *testing.T) { startOlder(t, cur, old) })
		if old.daemon != "" {
			m.cell(t, fmt.Sprintf("linger          %s successor beside a current server with Linger: today's drain, nobody lingers", old.name),
				func(t *testing.T) { drainBeside(t, cur, old) })
			m.cell(t, fmt.Sprintf("linger          current successor (Linger) beside a %s server: takes over as today", old.name),
				func(t *testing.T) { drainBeside(t, old, cur) })
		}
	}
	all := append([]build{cur}, olds...)
	for _, r := range all {
		for _, c := range all {
			m.cell(t, fmt.Sprintf("status          %s runnerctl on a %s runner", c.name, r.name), func(t *testing.T) { statusBy(t, r, c) })
		}
	}
	m.print(t, built, time.Since(began))
}

// matrix is the cells played, in order: PASS, FAIL, or ---- for a cell
// that -run did not select.
type matrix struct {
	lines []string
}

func (m *matrix) cell(t *testing.T, name string, play func(t *testing.T)) {
	began := time.Now()
	ran := false
	ok := t.Run(name, func(t *testing.T) { ran = true; play(t) })
	verdict := "PASS"
	switch {
	case !ran:
		verdict = "----" // not selected by -run
	case !ok:
		verdict = "FAIL"
	}
	m.lines = append(m.lines, fmt.Sprintf("%s  %s  (%.1fs)", verdict, name, time.Since(began).Seconds()))
}

func (m *matrix) print(t *testing.T, built, total time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "compat matrix (current against %s; builds %.0fs, total %.0fs):\n", releaseList(), built.Seconds(), total.Seconds())
	for _, l := range m.lines {
		b.WriteString("  " + l + "\n")
	}
	fmt.Print(b.String())
	t.Log("\n" + b.String())
}

func releaseList() string {
	var s []string
	for _, r := range releases {
		s = append(s, r.name+" ("+r.commit+")")
	}
	return strings.Join(s, ", ")
}

// gitRoot is the top of the clone this test runs in.
func gitRoot(t *testing.T) string {
	out, err := exec.Command("git", "-C", "..", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err, "compat: this test runs inside a git clone of runnerstate")
	return strings.TrimSpace(string(out))
}

// exportCommit writes the tree of r's commit into dir, from the clone's own
// history, and returns dir.
func exportCommit(t *testing.T, root string, r release, dir string) string {
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", r.commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("compat: commit %s (%s) is not in this clone's history (%s%v): clone in full (git fetch --unshallow) to test against it", r.commit, r.name, out, err)
	}
	tarball := filepath.Join(dir, "tree.tar")
	if out, err := exec.Command("git", "-C", root, "archive", "--format=tar", "-o", tarball, r.commit).CombinedOutput(); err != nil {
		t.Fatalf("compat: git archive %s (%s): %s%v", r.commit, r.name, out, err)
	}
	src := filepath.Join(dir, "src")
	require.NoError(t, os.Mkdir(src, 0o755))
	if out, err := exec.Command("tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		t.Fatalf("compat: unpack %s: %s%v", r.commit, out, err)
	}
	return src
}

// buildTree builds examples/runner and examples/runnerctl of the module at
// src into bins, named after name.
func buildTree(t *testing.T, name, src, bins string) build {
	out := filepath.Join(bins, name)
	require.NoError(t, os.MkdirAll(out, 0o755))
	cmd := exec.Command("go", "build", "-o", out+string(filepath.Separator), "./examples/runner", "./examples/runnerctl")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compat: build %s in %s: %s%v", name, src, msg, err)
	}
	return build{name: name, runner: filepath.Join(out, "runner"), ctl: filepath.Join(out, "runnerctl")}
}

// proc is a process this test started, in a process group of its own
// (its jobs with it), killed with its group when the test ends.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  string // its stdout and stderr
	done chan struct{}
	code int
}

func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(out)
	require.NoError(t, err)
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	p := &proc{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		p.code = exitCode(cmd.ProcessState)
		close(p.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(testharness.Wait):
			t.Errorf("%s (pid %d) was not reaped", name, cmd.Process.Pid)
		}
	})
	return p
}

func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exit waits, at most d, for p to exit and returns its code.
func (p *proc) exit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("%s (pid %d) did not exit within %v; its output:\n%s", p.name, p.pid(), d, p.output())
		return -1
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) output() string {
	data, _ := os.ReadFile(p.out)
	return string(data)
}

var timeRE = regexp.MustCompile(`^time=(\S+) `)

// logTime is the time of p's first log line whose message is msg.
func (p *proc) logTime(t *testing.T, msg string) time.Time {
	t.Helper()
	for line := range strings.Lines(p.output()) {
		if !strings.Contains(line, "msg="+msg+" ") && !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		m := timeRE.FindStringSubmatch(line)
		require.NotNil(t, m, "a time in %q", line)
		at, err := time.Parse(time.RFC3339Nano, m[1])
		require.NoError(t, err)
		return at
	}
	t.Fatalf("%s never logged %q; its output:\n%s", p.name, msg, p.output())
	return time.Time{}
}

func (p *proc) logged(msg string) bool {
	out := p.output()
	return strings.Contains(out, "msg="+msg+" ") || strings.Contains(out, `msg="`+msg+`"`)
}

var jobRE = regexp.MustCompile(`msg="job started" .*\bpid=(\d+)`)

// jobs are the pids of the jobs p logged as started.
func (p *proc) jobs() []int {
	var pids []int
	for _, m := range jobRE.FindAllStringSubmatch(p.output(), -1) {
		pid, _ := strconv.Atoi(m[1])
		pids = append(pids, pid)
	}
	return pids
}

// runner starts b's runner on dir with args.
func runner(t *testing.T, b build, dir string, args ...string) *proc {
	t.Helper()
	return startProc(t, b.name+" runner", b.runner, append([]string{"-dir", dir}, args...)...)
}

// waitFor polls cond every few milliseconds until it holds, at most d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readyRunner waits until p holds dir with its published record (Specs set:
// the example runner's Publish, never an admission placeholder).
func readyRunner(t *testing.T, dir string, p *proc, d time.Duration) runnerstate.Record {
	t.Helper()
	var rec runnerstate.Record
	waitFor(t, p.name+" ready in "+dir, d, func() bool {
		if p.exited() {
			t.Fatalf("%s exited %d before it was ready; its output:\n%s", p.name, p.code, p.output())
		}
		r, held, err := runnerstate.Running(dir)
		rec = r
		return err == nil && held && r.PID == p.pid() && r.Ready && len(r.Specs) > 0
	})
	return rec
}

// stop asks dir's runner p to stop now, with the current library, and
// waits for its exit 0.
func stop(t *testing.T, dir string, p *proc) {
	t.Helper()
	require.NoError(t, runnerstate.RequestRestart(dir, runnerstate.RestartNow))
	assert.Equal(t, 0, p.exit(t, testharness.Wait), "%s asked to stop", p.name)
}

// alive reports whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// takeover: a runner of a, then a runner of b that takes the directory
// over cooperatively (mode): a stops before b is admitted, exits 0, and with
// drain lets its running jobs finish.
func takeover(t *testing.T, a, b build, mode string) {
	dir := t.TempDir()
	job := "10s"
	if mode == runnerstate.RestartDrain {
		job = "600ms"
	}
	first := runner(t, a, dir, "-job", job)
	readyRunner(t, dir, first, testharness.Wait)
	waitFor(t, "a job of "+first.name, testharness.Wait, func() bool { return len(first.jobs()) > 0 })
	second := runner(t, b, dir, "-mode", mode, "-job", "10s")
	readyRunner(t, dir, second, testharness.Wait)
	require.Equal(t, 0, first.exit(t, testharness.Wait), "%s asked to go exits 0; its output:\n%s", first.name, first.output())
	stopped, admitted := first.logTime(t, "stopped"), second.logTime(t, "admitted")
	assert.False(t, admitted.Before(stopped), "%s admitted at %v, before %s stopped at %v", second.name, admitted, first.name, stopped)
	if mode == runnerstate.RestartDrain {
		assert.True(t, first.logged("job finished"), "%s finished its jobs", first.name)
		assert.False(t, first.logged("job cancelled"), "a drain cancels no job; %s's output:\n%s", first.name, first.output())
	}
	stop(t, dir, second)
}

// killedWithJobs: a runner of a with jobs running is killed (-9); a runner
// of b is admitted only once those jobs are gone.
func killedWithJobs(t *testing.T, a, b build) {
	dir := t.TempDir()
	first := runner(t, a, dir, "-job", "60s")
	readyRunner(t, dir, first, testharness.Wait)
	waitFor(t, "two jobs of "+first.name, testharness.Wait, func() bool { return len(first.jobs()) >= 2 })
	jobs := first.jobs()
	require.NoError(t, syscall.Kill(first.pid(), syscall.SIGKILL))
	first.exit(t, testharness.Wait)
	for _, pid := range jobs {
		require.True(t, alive(pid), "job %d outlives its killed runner", pid)
	}
	second := runner(t, b, dir, "-kill-after", "2s")
	readyRunner(t, dir, second, testharness.Wait)
	for _, pid := range jobs {
		assert.False(t, alive(pid), "job %d of the killed %s still runs beside %s", pid, first.name, second.name)
	}
	stop(t, dir, second)
}

// race: a runner of holder holds dir, draining slowly; a starter of first
// registers, then one of second: second (the newest) is admitted, first
// steps aside (exit 75) and is never admitted, and gate.json stays sound.
// While the holder still holds dir, first's withdrawal (its own rewrite of
// gate.json) keeps second's entry.
func race(t *testing.T, holder, first, second build) {
	dir := t.TempDir()
	r := runner(t, holder, dir, "-job", "3s")
	readyRunner(t, dir, r, testharness.Wait)
	waitFor(t, "a job of "+r.name, testharness.Wait, func() bool { return len(r.jobs()) > 0 })
	f := runner(t, first, dir, "-mode", "drain", "-wait", "30s")
	waitFor(t, f.name+" waiting in the gate", testharness.Wait, func() bool { return waiting(t, dir, f.pid()) })
	s := runner(t, second, dir, "-mode", "drain", "-wait", "30s")
	require.Equal(t, runnerstate.ExitBusy, f.exit(t, testharness.Wait), "the older starter steps aside; its output:\n%s", f.output())
	if rec, held, _ := runnerstate.Running(dir); held && rec.PID == r.pid() {
		assert.True(t, waiting(t, dir, s.pid()), "%s's rewrite of gate.json keeps %s waiting", f.name, s.name)
	}
	readyRunner(t, dir, s, testharness.Wait)
	assert.False(t, f.logged("admitted"), "both starters admitted; %s's output:\n%s", f.name, f.output())
	assert.Equal(t, 0, r.exit(t, testharness.Wait))
	g := soundGate(t, dir)
	assert.Empty(t, g.Waiting, "nobody waits once %s is admitted", s.name)
	stop(t, dir, s)
}

// waiting reports whether gate.json lists pid as a waiting starter.
func waiting(t *testing.T, dir string, pid int) bool {
	g := soundGate(t, dir)
	return slices.ContainsFunc(g.Waiting, func(e gate.Entry) bool { return e.Starter.PID == pid })
}

// soundGate reads dir's gate.json, which must parse, and whose numbers
// must agree: no sequence number handed out twice, none above seq.
func soundGate(t *testing.T, dir string) gate.State {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "gate.json"))
	if errors.Is(err, os.ErrNotExist) {
		return gate.State{}
	}
	require.NoError(t, err)
	g, err := gate.Parse(data)
	require.NoError(t, err, "gate.json parses: %s", data)
	seen := map[uint64]bool{}
	for _, e := range g.Waiting {
		assert.False(t, seen[e.Seq], "sequence number %d handed out twice: %s", e.Seq, data)
		seen[e.Seq] = true
		assert.LessOrEqual(t, e.Seq, g.Seq, "a waiting starter's number is handed out: %s", data)
		assert.Greater(t, e.Seq, g.Admitted, "a waiting starter came after the last admission: %s", data)
	}
	assert.LessOrEqual(t, g.Admitted, g.Seq, "admitted is a number handed out: %s", data)
	return g
}

// startOlder: the current runnerctl's start, starting old's runner, returns
// the runner's published record (Specs and MaxParallel set), never the
// placeholder its admission writes first. Played a few times: the old
// answer was wrong in about half the runs.
func startOlder(t *testing.T, cur, old build) {
	for i := range 5 {
		dir := t.TempDir()
		out, code := run(t, cur.ctl, "start", "--dir", dir, "--json", "--timeout", "30s", "--", old.runner, "-dir", dir, "-job", "5s")
		var rec runnerstate.Record
		if code == 0 {
			require.NoError(t, json.Unmarshal([]byte(out), &rec), "run %d: start --json prints a record: %s", i, out)
		}
		if rec.PID > 0 {
			pgid := rec.PID // Start gives the runner a session of its own
			t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
		}
		require.Equal(t, 0, code, "run %d: start exits 0: %s", i, out)
		assert.Equal(t, []string{"demo-job"}, rec.Specs, "run %d: start returned the runner's published record, not its placeholder: %s", i, out)
		assert.Equal(t, 2, rec.MaxParallel, "run %d", i)
		require.NoError(t, runnerstate.RequestRestart(dir, runnerstate.RestartNow))
		waitFor(t, "the started runner gone", testharness.Wait, func() bool { _, held, _ := runnerstate.Running(dir); return !held })
	}
}

// statusBy: with a runner of r ready, runnerctl status of b exits 0
// naming it, and its --json says held and verified.
func statusBy(t *testing.T, r, b build) {
	dir := t.TempDir()
	p := runner(t, r, dir, "-job", "10s")
	readyRunner(t, dir, p, testharness.Wait)
	out, code := run(t, b.ctl, "status", "--dir", dir)
	assert.Equal(t, 0, code, "%s runnerctl status on a %s runner: %s", b.name, r.name, out)
	assert.Contains(t, out, strconv.Itoa(p.pid()), "%s runnerctl status names the %s runner", b.name, r.name)
	out, code = run(t, b.ctl, "status", "--dir", dir, "--json")
	var rep struct {
		Held     bool `json:"held"`
		Verified bool `json:"verified"`
		Holder   struct {
			PID int `json:"pid"`
		} `json:"holder"`
	}
	assert.Equal(t, 0, code, "%s runnerctl status --json: %s", b.name, out)
	if assert.NoError(t, json.Unmarshal([]byte(out), &rep), "%s runnerctl status --json: %s", b.name, out) {
		assert.True(t, rep.Held && rep.Verified, "%s runnerctl status --json on a %s runner: %s", b.name, r.name, out)
		assert.Equal(t, p.pid(), rep.Holder.PID, "%s runnerctl status --json names the holder", b.name)
	}
	stop(t, dir, p)
}

// run runs bin with args to its end (bounded) and returns its stdout and
// its exit code; its stderr is appended to what it returns on failure.
func run(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * testharness.Wait):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s %v did not end", bin, args)
	}
	code := exitCode(cmd.ProcessState)
	if code != 0 {
		return stdout.String() + stderr.String(), code
	}
	return stdout.String(), code
}
