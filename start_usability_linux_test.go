//go:build linux

package runnerstate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a client of Start meets once it builds something real, each with
// real processes, as in start_linux_test.go.

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

// The bound on an unreadable record: only one that stays so under the same
// verified holder for recordUnreadableFor fails a Start; a momentary
// unreadable read (a file being replaced), a readable or absent record, or
// another holder starts the count again.
func TestUnreadableRecordBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := Identity{PID: 10, Instance: "a", StartTicks: 1}
	b := Identity{PID: 11, Instance: "b", StartTicks: 2}
	type seen struct {
		after    time.Duration
		holder   Identity
		corrupt  bool
		verified bool
	}
	for _, tc := range []struct {
		name  string
		looks []seen
		fails bool
	}{
		{"one unreadable look", []seen{{0, a, true, true}}, false},
		{"unreadable for the bound", []seen{{0, a, true, true}, {500 * time.Millisecond, a, true, true}, {recordUnreadableFor, a, true, true}}, true},
		{"unreadable, then not, then again", []seen{{0, a, true, true}, {600 * time.Millisecond, a, false, true}, {700 * time.Millisecond, a, true, true}, {recordUnreadableFor + 100*time.Millisecond, a, true, true}}, false},
		{"another holder", []seen{{0, a, true, true}, {recordUnreadableFor, b, true, true}}, false},
		{"the holder not verified", []seen{{0, a, true, false}, {recordUnreadableFor, a, true, false}, {2 * recordUnreadableFor, a, true, false}}, false},
		{"verified again after not", []seen{{0, a, true, false}, {recordUnreadableFor, a, true, true}, {2 * recordUnreadableFor, a, true, true}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u unreadableSince
			fails := false
			for _, s := range tc.looks {
				fails = u.still(s.holder, s.corrupt && s.verified, t0.Add(s.after))
			}
			assert.Equal(t, tc.fails, fails)
		})
	}
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

// The line a StartError quotes: the last non-empty line of the tail, cut
// to about 200 characters keeping its beginning and its end, printable.
func TestStartErrorLastLine(t *testing.T) {
	long := "panic: " + strings.Repeat("x", 300) + ": bind: invalid argument"
	for _, tc := range []struct{ tail, want string }{
		{"", ""},
		{"\n\n", ""},
		{"first\nlast\n", "last"},
		{"first\nlast\r\n\n  \n", "last"},
		{"no newline", "no newline"},
		{"a\x1b[31mred\n", `a\x1b[31mred`},
	} {
		assert.Equal(t, tc.want, lastLogLine(tc.tail), "%q", tc.tail)
	}
	got := lastLogLine("before\n" + long + "\n")
	assert.LessOrEqual(t, len([]rune(got)), 210)
	assert.True(t, strings.HasPrefix(got, "panic: xxx"), got)
	assert.True(t, strings.HasSuffix(got, ": bind: invalid argument"), got)
	assert.Contains(t, got, "…")
	e := &StartError{Dir: "/d", PID: 5, ExitCode: 1, Log: "/d/runner.log", LogTail: "x\n" + long}
	assert.Contains(t, e.Error(), ": bind: invalid argument")
	assert.LessOrEqual(t, len(e.Error()), 400)
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
