//go:build linux

package runnerstate

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Tests of runnerstate.go that need Linux itself: zombies seen through
// waitid and /proc, a lock on its way to free, a probe that touches no
// locked file.

// Case: a child runner holds the lock, is killed with SIGKILL and not yet
// reaped. Liveness says Dead; Acquire in another process succeeds at once.
func TestAcquireAfterZombieHolder(t *testing.T) {
	dir := tempDir(t)
	runner := startChild(t, "acquire", dir)
	runner.Expect("acquired")
	rec := readRecordFile(t, dir)
	require.Equal(t, runner.PID(), rec.PID)

	require.NoError(t, runner.Cmd.Process.Signal(syscall.SIGKILL))
	// Wait until the whole thread group has exited, without reaping it
	// (WNOWAIT): then it is a zombie. A multi-threaded process's leader
	// shows state Z in /proc while its other threads are still exiting and
	// its files, the lock among them, still open.
	var info unix.Siginfo
	require.NoError(t, unix.Waitid(unix.P_PID, runner.PID(), &info, unix.WEXITED|unix.WNOWAIT, nil))
	data, err := os.ReadFile("/proc/" + strconv.Itoa(runner.PID()) + "/stat")
	require.NoError(t, err, "not reaped yet")
	st, err := liveness.ParseStat(data)
	require.NoError(t, err)
	require.Equal(t, byte('Z'), st.State)
	v, why := liveness.Check(liveness.Identity(rec.Process))
	assert.Equal(t, liveness.Dead, v, why)

	_, ok, err := Running(dir)
	require.NoError(t, err)
	assert.False(t, ok, "a zombie holds no lock")

	next := startChild(t, "try-acquire", dir)
	next.Expect("acquired")
	require.NoError(t, next.Wait())
	runner.Wait()
}

// hasWarning reports whether one of r's warnings contains s.
func hasWarning(r Report, s string) bool {
	for _, w := range r.Warnings {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

// A busy answer whose lock nobody holds any more (the file was closed, but
// a reader of the holder's /proc/<pid>/fdinfo, a probe, still has it, so
// the kernel has not let the lock go) is tried again until the lock is
// free: Acquire succeeds. Here a mapping stands in for the reader: it keeps
// the closed file, and its lock, until it is unmapped. A lock that stays on
// its way for ever is busy after a bounded wait.
func TestAcquireWaitsOutALockOnItsWayToFree(t *testing.T) {
	if !kernelNamesHolders {
		t.Skip("the kernel does not list lock holders here: a busy answer is tried again only briefly")
	}
	dir := tempDir(t)
	mapping := startChild(t, "mmap-lock", dir)
	mapping.Expect("mapped")

	_, err := Acquire(dir)
	require.ErrorIs(t, err, ErrBusy, "still mapped after passingWait: busy")

	// The hook runs before the retries: the mapping goes while it runs.
	seen := make(chan filelock.BusyAnswer, 1)
	unmapped := make(chan struct{})
	fn := func(state filelock.BusyAnswer) { seen <- state; <-unmapped }
	defer filelock.SetPassingHook(fn)()
	type result struct {
		release func()
		err     error
	}
	done := make(chan result, 1)
	go func() {
		release, err := Acquire(dir)
		done <- result{release, err}
	}()
	require.Equal(t, filelock.BusyPassing, <-seen, "nobody holds it through a descriptor: passing")
	mapping.Send("unmap")
	mapping.Expect("unmapped")
	close(unmapped)
	r := <-done
	require.NoError(t, r.err, "admitted once the lock is free")
	r.release()
	require.NoError(t, mapping.Stop())
}

// A lock held through a descriptor, even one a child inherited, is held:
// the answer is busy at once, not tried again.
func TestAcquireBusyAtOnceWhenHeld(t *testing.T) {
	if !kernelNamesHolders {
		t.Skip("the kernel does not list lock holders here")
	}
	dir := tempDir(t)
	holder := startChild(t, "acquire", dir)
	holder.Expect("acquired")
	seen := make(chan filelock.BusyAnswer, 8)
	fn := func(state filelock.BusyAnswer) { seen <- state }
	defer filelock.SetPassingHook(fn)()
	_, err := Acquire(dir)
	assert.ErrorIs(t, err, ErrBusy)
	assert.Equal(t, filelock.BusyHeld, <-seen)
	require.NoError(t, holder.Stop())
}

func init() { registerRole("probe-once", roleProbeOnce) }

// probe-once: Running and Status of dir, once each; says what they found.
func roleProbeOnce(dir string) int {
	rec, ok, err := Running(dir)
	say("running %d %v %v", rec.PID, ok, err)
	r, err := Status(dir)
	say("status %d %v %v", r.Holder.PID, r.Verified, err)
	return 0
}

// TestProbeTouchesNoLockedFile traces (strace -f) a process that asks Running
// and Status about a directory whose verified runner published its record:
// neither opens a file of the directory that carries a lock, nor makes any
// flock call. Such an open and its close would wait behind every reader of
// /proc/locks on the machine (see lockholder.InspectPair), whatever it costs.
func TestProbeTouchesNoLockedFile(t *testing.T) {
	straceBin, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace is not installed (apt-get install strace): this test traces a probe's system calls")
	}
	dir := tempDir(t)
	runner := startChild(t, "runner", dir)
	runner.Expect("acquired")

	out := filepath.Join(t.TempDir(), "trace")
	cmd := testharness.Command(dir, straceBin, "-f", "-qq", "-o", out, "-e", "trace=openat,open,flock")
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"=probe-once")
	said, err := cmd.Output()
	if err != nil && strings.Contains(string(said), "ptrace") {
		t.Skipf("strace cannot trace here: %s", said)
	}
	require.NoError(t, err, "%s", said)
	assert.Contains(t, string(said), "running "+strconv.Itoa(runner.PID())+" true <nil>")
	assert.Contains(t, string(said), "status "+strconv.Itoa(runner.PID())+" true <nil>")

	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	var opened []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		assert.NotContains(t, line, "flock(", "a probe made a flock call")
		if strings.Contains(line, dir) {
			opened = append(opened, line)
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, opened, "the trace shows no open under %s: strace traced nothing?", dir)
	for _, line := range opened {
		// Every file of the directory that carries a lock is named *.lock
		// (runner.lock, tree.lock, .state.lock).
		assert.NotContains(t, line, `.lock"`, "a probe opened a file that carries a lock")
	}
}

func init() { registerRole("mmap-lock", roleMmapLock) }

// mmap-lock: take an exclusive flock on dir's runner.lock, map the file and
// close the descriptor, so that the lock stays held by an open file that no
// descriptor names (as a /proc/<pid>/fdinfo reader holds a file the holder
// has just closed), and say "mapped"; command "unmap" unmaps it, which
// frees the lock, and says "unmapped".
func roleMmapLock(dir string) int {
	path := filepath.Join(dir, LockName)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		say("error %v", err)
		return 1
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		say("error %v", err)
		return 1
	}
	mem, err := unix.Mmap(fd, 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		say("error %v", err)
		return 1
	}
	unix.Close(fd)
	say("mapped")
	for cmd := range commands() {
		if cmd == "unmap" && mem != nil {
			unix.Munmap(mem)
			mem = nil
			say("unmapped")
		}
	}
	return 0
}
