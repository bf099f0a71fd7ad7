//go:build linux

package runnerstate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/locktable"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Answers that hold everywhere: containers, other users, foreign users of
// the same files, busy machines. Each test here is one case of the trust
// issue, with real processes.

// inChildPIDNamespace is the test binary re-executed with arg as pid 1's
// child in a new PID namespace with its own /proc, as in a container that
// shares the directory with the host. It skips the test where PID
// namespaces cannot be made (not root, a locked-down container).
func inChildPIDNamespace(t *testing.T, arg string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) is not installed")
	}
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a PID namespace here (needs root): %v: %s", err, out)
	}
	return testharness.Command(arg, "unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
}

// ask sends one question to an observe child and returns its answer.
func ask(t *testing.T, c *child, question string) observation {
	t.Helper()
	c.Send(question)
	var a observation
	require.NoError(t, json.Unmarshal([]byte(c.Expect("answer ")), &a), question)
	return a
}

// Case 1: an observer in a container (another PID namespace, with its own
// /proc) sees the kernel's lock list empty for a lock the host's runner
// holds. It must still say held, name the holder as far as it can see (pid
// 0, the lock file's identity with verdict other-namespace), never list the
// live holder as stale, keep a standby waiting, and reach the runner with a
// restart request.
func TestTrustObserverInAChildPIDNamespace(t *testing.T) {
	dir := t.TempDir()
	observer := startChildCmd(t, inChildPIDNamespace(t, dir), "observe")
	runner := startRunner(t, dir, "stubborn")

	a := ask(t, observer, "status")
	require.Empty(t, a.Err)
	r := a.Report
	assert.True(t, r.Held, "held, though the lock list there is empty")
	assert.False(t, r.Verified)
	assert.Zero(t, r.Holder.PID, "a host pid means nothing there")
	assert.Equal(t, "other-namespace", r.Verdict)
	assert.Empty(t, r.Stale, "the live holder is never stale")
	assert.True(t, containsAny(r.Warnings, "not visible from this PID namespace"), "%q", r.Warnings)

	a = ask(t, observer, "running")
	require.Empty(t, a.Err)
	assert.True(t, a.Running)

	a = ask(t, observer, "standby 300ms")
	assert.True(t, a.Busy, "the standby keeps waiting until its context ends: %+v", a)

	a = ask(t, observer, "lock")
	assert.True(t, a.Busy, "%+v", a)

	a = ask(t, observer, "restart drain")
	require.Empty(t, a.Err)
	runner.Expect("ack drain")

	require.NoError(t, runner.Stop())
	a = ask(t, observer, "status")
	require.Empty(t, a.Err)
	assert.False(t, a.Report.Held, "free once the runner let go")
	a = ask(t, observer, "standby 10s")
	require.Empty(t, a.Err)
	assert.True(t, a.Standby.Resumed)
	require.NoError(t, observer.Stop())
}

// Case 1, the starter's side: a starter in a sibling container (its own PID
// namespace, as the runner has its own) leaves its restart request, never
// signals a holder it cannot see, and waits asleep, not spinning (a starter
// that finds the lock busy and the list empty in turn spends 70% of a
// core). A cooperative runner, asked, goes, and the starter is admitted.
func TestTrustStarterInASiblingPIDNamespace(t *testing.T) {
	t.Run("stubborn runner", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv(envBehaviour, "stubborn")
		runner := startChildCmd(t, inChildPIDNamespace(t, dir), "runner")
		runner.Expect("acquired")
		opts, err := json.Marshal(TakeoverOptions{Grace: time.Millisecond, KillAfter: time.Millisecond})
		require.NoError(t, err)
		t.Setenv(envOptions, string(opts))
		const wait = 2 * time.Second
		t.Setenv(envWait, wait.String())
		starter := startChildCmd(t, inChildPIDNamespace(t, dir), "starter")
		runner.Expect("ack now")
		assert.True(t, strings.HasPrefix(starter.Expect(""), "busy"), "busy at the end of its wait, having signalled nobody")
		require.NoError(t, starter.Wait())
		usage := starter.Cmd.ProcessState
		cpu := usage.UserTime() + usage.SystemTime()
		t.Logf("the starter used %v of CPU in its %v wait", cpu, wait)
		assert.Less(t, cpu, wait/3, "a starter waits asleep, not polling a core")
		require.NoError(t, runner.Stop())
	})
	t.Run("cooperative runner", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv(envBehaviour, "obey")
		runner := startChildCmd(t, inChildPIDNamespace(t, dir), "runner")
		runner.Expect("acquired")
		t.Setenv(envOptions, "{}")
		t.Setenv(envWait, childWait.String())
		starter := startChildCmd(t, inChildPIDNamespace(t, dir), "starter")
		runner.Expect("exiting now")
		assert.Equal(t, "admitted", starter.Expect(""))
		require.NoError(t, starter.Stop())
		require.NoError(t, runner.Wait())
	})
}

// Case 1, interference: an observer in a container probes (a shared lock
// taken and dropped at once) whenever its lock list shows the lock free,
// and a probe must never make an Acquire fail: a busy answer that may be a
// probe's is tried again.
func TestTrustProbesFromAContainerNeverFailAnAcquire(t *testing.T) {
	dir := t.TempDir()
	prober := startChildCmd(t, inChildPIDNamespace(t, dir), "probe-loop")
	prober.Expect("probing")
	for i := range 2000 {
		release, err := Acquire(dir)
		require.NoError(t, err, "acquisition %d beside a prober", i)
		release()
	}
	prober.CloseStdin()
	f := strings.Fields(prober.Expect("probed"))
	require.Len(t, f, 2)
	t.Logf("the prober called Status %s times meanwhile (%s errors)", f[0], f[1])
	assert.Equal(t, "0", f[1])
	require.NoError(t, prober.Wait())
}

// Case 2: an observer running as another user cannot read runner.lock
// (0600), nor the holder's descriptors. It names the holder from
// runner.json (0644), which the kernel confirms, says what really happened
// ("cannot read", not "names no holder"), and lists no live pid as stale.
func TestTrustObserverAsAnotherUser(t *testing.T) {
	dir := publicDir(t)
	runner := startChild(t, "acquire", dir)
	runner.Expect("acquired")
	observer := startChildCmd(t, asNobody(t, dir), "observe")
	a := ask(t, observer, "status")
	require.Empty(t, a.Err)
	r := a.Report
	assert.True(t, r.Held)
	assert.True(t, r.Verified, "named from runner.json, confirmed by the kernel: %q", r.Warnings)
	assert.Equal(t, runner.PID(), r.Holder.PID)
	assert.Equal(t, runner.PID(), r.Holder.Process.PID)
	assert.Empty(t, r.Stale)
	assert.True(t, containsAny(r.Warnings, "cannot read"), "%q", r.Warnings)
	assert.False(t, containsAny(r.Warnings, "names no holder"), "%q", r.Warnings)
	a = ask(t, observer, "running")
	require.Empty(t, a.Err)
	assert.True(t, a.Running)
	assert.Equal(t, runner.PID(), a.Record.PID)
	require.NoError(t, observer.Stop())
	require.NoError(t, runner.Stop())
}

// Case 3: "flock DIR cmd", flock(1)'s own idiom for a directory, holds a lock
// on the directory itself. The library's state lock is a file of its own, so
// nothing stalls: Acquire, Publish, AppendLine, a restart request, Takeover
// and release all go through, and nothing fails to clean up.
func TestTrustFlockOnTheDirectory(t *testing.T) {
	dir := t.TempDir()
	holdWithFlock(t, dir)
	log := captureLog(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	require.NoError(t, Publish(dir, Record{Specs: []string{"beside flock(1)"}}))
	require.NoError(t, AppendLine(dir, "journal", "one"))
	require.NoError(t, RequestRestart(dir, RestartDrain))
	release()
	release, err = Takeover(background(t), dir, TakeoverOptions{})
	require.NoError(t, err)
	release()
	assert.NotContains(t, log.String(), "could not")
	assert.NotContains(t, log.String(), "stayed busy")
}

// holdWithFlock runs flock(1) on path (a directory or a file) and returns
// once it holds the lock; it is killed when the test ends.
func holdWithFlock(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) (util-linux) is not installed")
	}
	cmd := exec.Command("flock", path, "sh", "-c", "echo locked; exec sleep 600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)
	return cmd
}

// Case 4: a process that truncates runner.lock (Python's filelock opens its
// file O_TRUNC before it tries the lock; so does ": > runner.lock") erases
// the live holder's identity. The holder stays verified (runner.json names
// the pid the kernel names), its WatchRestart writes the identity back, and
// a runner that ignores requests and SIGTERM can still be replaced.
func TestTrustLockFileTruncatedWhileHeld(t *testing.T) {
	for _, tc := range []struct {
		name     string
		truncate func(t *testing.T, path string)
	}{
		{"an O_TRUNC open", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
		{"a shell's ': >'", func(t *testing.T, path string) {
			out, err := exec.Command("sh", "-c", `: > "$0"`, path).CombinedOutput()
			require.NoError(t, err, "%s", out)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			runner := startRunner(t, dir, "stubborn")
			lockPath := filepath.Join(dir, LockName)
			tc.truncate(t, lockPath)

			// Whether or not the holder has restored it yet, it is verified:
			// runner.json names the pid the kernel names.
			st, err := Status(dir)
			require.NoError(t, err)
			assert.True(t, st.Held)
			assert.True(t, st.Verified, "%q", st.Warnings)
			assert.Equal(t, runner.PID(), st.Holder.PID)
			rec, ok, err := Running(dir)
			require.NoError(t, err)
			assert.True(t, ok)
			assert.Equal(t, runner.PID(), rec.PID)
			// The holder's WatchRestart writes its identity back.
			eventually(t, "the holder restores its identity in runner.lock", func() bool {
				data, err := os.ReadFile(lockPath)
				id, ok := parseLockContent(data)
				return err == nil && ok && id.PID == runner.PID()
			})

			sent := signalsSeen(t)
			release, err := Takeover(background(t), dir, TakeoverOptions{Grace: 100 * time.Millisecond, KillAfter: 100 * time.Millisecond})
			require.NoError(t, err, "a runner whose lock file was erased can still be replaced")
			pid := strconv.Itoa(runner.PID())
			assert.Equal(t, []string{pid + " terminated", pid + " killed"}, sent())
			var ee *exec.ExitError
			require.ErrorAs(t, runner.Wait(), &ee)
			assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
			release()
		})
	}
}

// Case 5: a runner.lock that already exists world-readable (made by touch,
// flock(1) or a restore) would let any local user take a shared lock on it
// and refuse every runner. Acquire and Takeover make it 0600; where the file
// is another user's and cannot be changed, a warning says so.
func TestTrustWorldReadableLockFileIsMadePrivate(t *testing.T) {
	for _, how := range []string{"Acquire", "Takeover"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			lockPath := filepath.Join(dir, LockName)
			require.NoError(t, os.WriteFile(lockPath, nil, 0o644))
			require.NoError(t, os.Chmod(lockPath, 0o666))
			log := captureLog(t)
			var release func()
			var err error
			if how == "Acquire" {
				release, err = Acquire(dir)
			} else {
				release, err = Takeover(background(t), dir, TakeoverOptions{})
			}
			require.NoError(t, err)
			defer release()
			fi, err := os.Stat(lockPath)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			assert.Contains(t, log.String(), "made the runner lock private")
		})
	}
	t.Run("another user's file", func(t *testing.T) {
		dir := publicDir(t)
		require.NoError(t, os.Chmod(dir, 0o777))
		lockPath := filepath.Join(dir, LockName)
		require.NoError(t, os.WriteFile(lockPath, nil, 0o644))
		require.NoError(t, os.Chmod(lockPath, 0o666)) // root's, writable by all
		cmd := asNobody(t, dir)
		cmd.Env = append(os.Environ(), "RUNNERSTATE_TRUST_DIRS="+dir) // shared on purpose: the directory is every user's
		runner := startChildCmd(t, cmd, "acquire-log")
		var log string
		require.NoError(t, json.Unmarshal([]byte(runner.Expect("acquired ")), &log))
		assert.Contains(t, log, "may not change its mode")
		fi, err := os.Stat(lockPath)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o666), fi.Mode().Perm(), "another user's file is left as it is")
		require.NoError(t, runner.Stop())
	})
	t.Run("made private, no other user can block it", func(t *testing.T) {
		dir := publicDir(t)
		release, err := Acquire(dir)
		require.NoError(t, err)
		release()
		blocker := startChildCmd(t, asNobody(t, filepath.Join(dir, LockName)), "rhold")
		line := blocker.Expect("error")
		assert.Contains(t, line, "permission denied")
		release, err = Acquire(dir)
		require.NoError(t, err, "nobody could take a shared lock on it")
		release()
	})
}

// Case 6 and 7: a live holder that recorded its descriptor is confirmed from
// /proc/<pid>/fdinfo/<fd> alone: no reading of /proc/locks, whose cost grows
// with every lock on the machine and which, read a page at a time, can miss
// an entry under churn. (The figures are bench/'s BenchmarkRunningLocks.)
func TestTrustHolderConfirmedWithoutTheLockList(t *testing.T) {
	dir := t.TempDir()
	runner := startChild(t, "acquire", dir)
	runner.Expect("acquired")
	// Unrelated locks held elsewhere on the machine.
	unrelated := t.TempDir()
	for i := range 2000 {
		f, err := os.Create(filepath.Join(unrelated, strconv.Itoa(i)))
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	}
	var reads atomic.Int32
	defer locktable.SetListHook(func() { reads.Add(1) })()
	rec, ok, err := Running(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, runner.PID(), rec.PID)
	assert.Equal(t, []string{"demo"}, rec.Specs, "verified: the full record")
	st, err := Status(dir)
	require.NoError(t, err)
	assert.True(t, st.Verified)
	assert.Zero(t, reads.Load(), "the lock list was read %d times", reads.Load())
	require.NoError(t, runner.Stop())
}

func init() { registerRole("observe", roleObserve) }

// observe: answer questions about dir, one per command, each as one line
// "answer <JSON>": "status" (Status), "running" (Running), "standby <d>"
// (Standby with a context of d), "restart <mode>" (RequestRestart), "lock"
// (a TryLock of dir's runner.lock). It runs until stdin closes.
func roleObserve(dir string) int {
	for cmd := range commands() {
		var a observation
		switch verb, arg, _ := strings.Cut(cmd, " "); verb {
		case "status":
			r, err := Status(dir)
			a.Report, a.Err = &r, errText(err)
		case "running":
			rec, ok, err := Running(dir)
			a.Record, a.Running, a.Err = &rec, ok, errText(err)
		case "standby":
			d, _ := time.ParseDuration(arg)
			ctx, cancel := context.WithTimeout(context.Background(), d)
			res, err := Standby(ctx, dir, StandbyOptions{})
			cancel()
			a.Standby, a.Err, a.Busy = &res, errText(err), errors.Is(err, ErrBusy)
		case "restart":
			a.Err = errText(RequestRestart(dir, arg))
		case "lock":
			unlock, err := TryLock(filepath.Join(dir, LockName))
			if err == nil {
				unlock()
			}
			a.Err, a.Busy = errText(err), errors.Is(err, ErrBusy)
		}
		line, _ := json.Marshal(a)
		say("answer %s", line)
	}
	return 0
}

// observation is one answer of the observe role.
type observation struct {
	Report  *Report        `json:"report,omitempty"`
	Record  *Record        `json:"record,omitempty"`
	Running bool           `json:"running,omitempty"`
	Standby *StandbyResult `json:"standby,omitempty"`
	Busy    bool           `json:"busy,omitempty"`
	Err     string         `json:"err,omitempty"`
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func init() { registerRole("probe-loop", roleProbeLoop) }

// probe-loop: call Status on dir as fast as it can, say "probing" after the
// first call and "probed <n> <errors>" once stdin closes.
func roleProbeLoop(dir string) int {
	stop := make(chan struct{})
	go func() {
		for range commands() {
		}
		close(stop)
	}()
	n, failed := 0, 0
	for {
		if _, err := Status(dir); err != nil {
			failed++
		}
		if n++; n == 1 {
			say("probing")
		}
		select {
		case <-stop:
			say("probed %d %d", n, failed)
			return 0
		default:
		}
	}
}

func init() { registerRole("acquire-log", roleAcquireLog) }

// acquire-log: Acquire dir with the package's log captured, say "acquired
// <log as JSON string>", hold until stdin closes.
func roleAcquireLog(dir string) int {
	var log testharness.LogBuffer
	SetLogger(slog.New(slog.NewTextHandler(&log, nil)))
	release, err := Acquire(dir)
	if err != nil {
		say("error %v", err)
		return 1
	}
	line, _ := json.Marshal(log.String())
	say("acquired %s", line)
	return holdUntilClosed(release)
}
