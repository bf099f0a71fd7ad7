//go:build linux

package liveness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func init() {
	// Role "leader-exit" must run on the main thread, so it runs here, in
	// init, where the runtime keeps the main goroutine on the main thread:
	// that thread exits alone (exit(2), not exit_group(2)), so the leader
	// shows state Z while the process lives on in its other threads until
	// stdin closes.
	if os.Getenv(testharness.RoleEnv) != "leader-exit" {
		return
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	syscall.Syscall(syscall.SYS_EXIT, 0, 0, 0)
}

// probeModes are the ways Linux probing can go: the pidfd path, and the
// kill(2) path taken when pidfd_open is missing (ENOSYS, kernels before 5.3)
// or refused by a seccomp filter (EPERM).
var probeModes = []struct {
	name  string
	pidfd bool
	open  func(pid, flags int) (int, error)
}{
	{"pidfd", true, unix.PidfdOpen},
	{"pidfd-old-kernel", true, oldKernelPidfdOpen},
	{"no-pidfd-ENOSYS", false, func(int, int) (int, error) { return -1, unix.ENOSYS }},
	{"no-pidfd-EPERM", false, func(int, int) (int, error) { return -1, unix.EPERM }},
}

// oldKernelPidfdOpen plays a kernel from 5.3 to 5.9: no PIDFD_NONBLOCK
// (EINVAL for any flag), and EINVAL rather than ENOENT for a thread id.
func oldKernelPidfdOpen(pid, flags int) (int, error) {
	if flags != 0 {
		return -1, unix.EINVAL
	}
	fd, err := unix.PidfdOpen(pid, flags)
	if errors.Is(err, unix.ENOENT) {
		return -1, unix.EINVAL
	}
	return fd, err
}

func forEachMode(t *testing.T, fn func(t *testing.T, pidfd bool)) {
	for _, m := range probeModes {
		t.Run(m.name, func(t *testing.T) {
			testPidfdOpen.Store(&m.open)
			t.Cleanup(func() { testPidfdOpen.Store(nil) })
			fn(t, m.pidfd)
		})
	}
}

// startHelper re-executes the test binary in role, behind the prefix
// command if any (unshare ...). It is killed and reaped when the test ends.
func startHelper(t testing.TB, role string, prefix ...string) *testharness.Child {
	t.Helper()
	return testharness.StartCmd(t, testharness.Command("", prefix...), role)
}

// startSleep starts `sleep 3600`, an unrelated process.
func startSleep(t testing.TB) *testharness.Child {
	t.Helper()
	return testharness.StartCmd(t, exec.Command("sleep", "3600"), "sleep")
}

func mustLookup(t testing.TB, pid int) Identity {
	t.Helper()
	id, err := Lookup(pid)
	require.NoError(t, err)
	return id
}

func procState(t testing.TB, pid int) byte {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(t, err)
	st, err := ParseStat(b)
	require.NoError(t, err)
	return st.State
}

// waitZombie waits (at most 10 s) until pid, killed but not reaped, shows
// state Z. It blocks on a pidfd of its own, which becomes readable at the
// exit, rather than sleeping.
func waitZombie(t testing.TB, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	// The leader of a thread group shows 'Z' as soon as its own thread has
	// exited, while the group's other threads may still be exiting; the
	// pidfd turns readable only once the whole group has (the kernel's
	// thread_group_exited). Wait for both: a zombie the pidfd reports.
	deadline := time.Now().Add(10 * time.Second)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, _ := unix.Poll(fds, 100)
		if n == 1 && fds[0].Revents&unix.POLLIN != 0 && procState(t, pid) == 'Z' {
			return
		}
		require.True(t, time.Now().Before(deadline), "pid %d did not become a zombie", pid)
	}
}

func TestSelf(t *testing.T) {
	cur := Current()
	require.NotZero(t, cur.StartTicks)
	require.NotEmpty(t, cur.BootID)
	require.NotEmpty(t, cur.PIDNS)
	assert.Regexp(t, `^[0-9]+:[0-9]+$`, cur.PIDNS)
	if cur.Machine != "" {
		assert.Len(t, cur.Machine, 32)
	}
	assert.WithinDuration(t, time.Now(), cur.StartTime, time.Hour, "start time from btime + ticks")

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { assert.Equal(t, cur, Current()) })
	}
	wg.Wait()

	forEachMode(t, func(t *testing.T, _ bool) {
		v, why := Check(cur)
		assert.Equal(t, Self, v, why)
		p, v, _ := Pin(cur)
		assert.Nil(t, p, "never pin self")
		assert.Equal(t, Self, v)

		got, err := Lookup(os.Getpid())
		require.NoError(t, err)
		want := cur
		want.Instance = ""
		assert.Equal(t, want, got)
	})
}

// TestChildLifecycle follows one child through alive, zombie (killed, not
// reaped) and reaped.
func TestChildLifecycle(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidfd bool) {
		c := startHelper(t, "block")
		id := mustLookup(t, c.PID())
		reused := id
		reused.StartTicks++

		v, why := Check(id)
		assert.Equal(t, Alive, v, why)
		assert.Contains(t, why, "match")
		v, why = Check(reused)
		assert.Equal(t, Stale, v, why)
		assert.Contains(t, why, "pid reused")

		require.NoError(t, c.Cmd.Process.Signal(syscall.SIGKILL))
		waitZombie(t, c.PID())
		v, why = Check(id)
		assert.Equal(t, Dead, v, why)
		_, err := Lookup(c.PID())
		assert.ErrorIs(t, err, ErrNoProcess)

		c.Wait()
		for _, rec := range []Identity{id, reused} {
			v, why = Check(rec)
			assert.Equal(t, Dead, v, why)
		}
		_, err = Lookup(c.PID())
		assert.ErrorIs(t, err, ErrNoProcess)
	})
}

// TestCheckRecords: records about one live child, edited the ways records
// go wrong. Cases marked probes=false must be settled without touching the
// kernel.
func TestCheckRecords(t *testing.T) {
	cur := Current()
	if cur.Machine == "" {
		t.Skip("no machine id on this system: the reboot case needs one")
	}
	tests := []struct {
		name   string
		edit   func(*Identity)
		want   Verdict
		reason string
		probes bool
	}{
		{"live", func(*Identity) {}, Alive, "start ticks", true},
		{"hostname and instance are not evidence", func(id *Identity) { id.Hostname, id.Instance = "elsewhere", "x" }, Alive, "match", true},
		{"container on this kernel (own machine id)", func(id *Identity) { id.Machine = hashMachine("container") }, Alive, "match", true},
		{"pid reused", func(id *Identity) { id.StartTicks-- }, Stale, "pid reused", true},
		{"rebooted", func(id *Identity) { id.BootID = "00000000-0000-0000-0000-000000000000" }, Stale, "rebooted", false},
		{"other machine", func(id *Identity) { id.BootID, id.Machine = "x", hashMachine("other") }, Foreign, "boot id", false},
		{"other machine, no boot id", func(id *Identity) { id.BootID, id.Machine = "", hashMachine("other") }, Foreign, "machine", false},
		{"other pid namespace", func(id *Identity) { id.PIDNS = "4:1" }, OtherNamespace, "pid namespace", false},
		{"no pid namespace", func(id *Identity) { id.PIDNS = "" }, Unverifiable, "no pid namespace in record", false},
		{"no boot id", func(id *Identity) { id.BootID = "" }, Unverifiable, "no boot id", false},
		{"legacy", func(id *Identity) { id.StartTicks = 0 }, Unverifiable, "legacy", false},
		{"pid 0", func(id *Identity) { id.PID = 0 }, Unverifiable, "no pid", false},
		{"negative pid", func(id *Identity) { id.PID = -id.PID }, Unverifiable, "no pid", false},
	}
	forEachMode(t, func(t *testing.T, _ bool) {
		c := startSleep(t)
		base := mustLookup(t, c.PID())
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				probed := recordProbes(t)
				id := base
				tt.edit(&id)
				v, why := Check(id)
				assert.Equal(t, tt.want, v, why)
				assert.Contains(t, why, tt.reason)

				p, pv, _ := Pin(id)
				assert.Equal(t, v, pv)
				assert.Equal(t, v == Alive, p != nil, "pinned only when alive")
				if p != nil {
					assert.Equal(t, id.PID, p.PID())
					assert.NoError(t, p.Close())
				}
				if !tt.probes {
					assert.Empty(t, *probed, "nothing may be probed")
				}
			})
		}
		assert.Nil(t, c.Cmd.ProcessState, "child untouched")
		assert.NotEqual(t, byte('Z'), procState(t, c.PID()))
	})
}

// otherThread returns a thread id of this process that is not its pid.
func otherThread(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	for _, e := range ents {
		if tid, _ := strconv.Atoi(e.Name()); tid > 0 && tid != os.Getpid() {
			return tid
		}
	}
	t.Skip("single-threaded")
	return 0
}

func TestThreadID(t *testing.T) {
	tid := otherThread(t)
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	require.NoError(t, err)
	st, err := ParseStat(b)
	require.NoError(t, err)
	// A record naming the thread with the thread's own start ticks: /proc/<tid>
	// answers (it is only hidden from listings) and the ticks match, yet it is
	// not a process.
	id := Current()
	id.Instance, id.PID, id.StartTicks = "", tid, st.StartTicks

	forEachMode(t, func(t *testing.T, pidfd bool) {
		recordProbes(t)
		if pidfd {
			// The kernel refuses a process pidfd for a thread: EINVAL on
			// older kernels, ENOENT on recent ones (seen on 6.18). Both lead
			// to Stale.
			_, err := unix.PidfdOpen(tid, unix.PIDFD_NONBLOCK)
			require.Error(t, err)
			require.True(t, errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT), "pidfd_open(thread): %v", err)
		}
		v, why := Check(id)
		assert.Equal(t, Stale, v, why)
		assert.Contains(t, why, "thread of process "+strconv.Itoa(os.Getpid()))
		p, v, _ := Pin(id)
		assert.Nil(t, p)
		assert.Equal(t, Stale, v)
		_, err := Lookup(tid)
		assert.ErrorIs(t, err, ErrNoProcess)
	})
}

func TestPinSignalWait(t *testing.T) {
	forEachMode(t, func(t *testing.T, _ bool) {
		c := startHelper(t, "block")
		p, v, why := Pin(mustLookup(t, c.PID()))
		require.Equal(t, Alive, v, why)
		require.NotNil(t, p)
		defer p.Close()
		assert.Equal(t, c.PID(), p.PID())
		assert.False(t, p.Exited())
		v, why = p.Verify()
		assert.Equal(t, Alive, v, why)

		// An already cancelled context returns at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		assert.ErrorIs(t, p.Wait(ctx), context.Canceled)
		assert.Less(t, time.Since(start), 2*time.Second)

		// A context ending during the wait wakes it; a second, concurrent
		// waiter is not disturbed by the first one's cancellation.
		long := make(chan error, 1)
		longCtx, longCancel := context.WithTimeout(context.Background(), time.Minute)
		defer longCancel()
		go func() { long <- p.Wait(longCtx) }()
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		start = time.Now()
		assert.ErrorIs(t, p.Wait(ctx), context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 5*time.Second)
		select {
		case err := <-long:
			t.Fatalf("Wait returned %v while the process runs", err)
		default:
		}

		require.NoError(t, p.Signal(syscall.SIGTERM))
		require.NoError(t, <-long)
		assert.True(t, p.Exited())
		assert.NoError(t, p.Wait(context.Background()))
		v, why = p.Verify()
		assert.Equal(t, Dead, v, why)
		assert.ErrorIs(t, p.Signal(syscall.SIGKILL), ErrNotAlive)

		require.NoError(t, p.Close())
		require.NoError(t, p.Close(), "idempotent")
		v, _ = p.Verify()
		assert.Equal(t, Unverifiable, v, "nothing is proven through a closed pin")

		err := c.Wait()
		require.Error(t, err)
		ws := c.Cmd.ProcessState.Sys().(syscall.WaitStatus)
		assert.True(t, ws.Signaled())
		assert.Equal(t, syscall.SIGTERM, ws.Signal())
	})
}

func TestCloseEndsWait(t *testing.T) {
	forEachMode(t, func(t *testing.T, _ bool) {
		c := startHelper(t, "block")
		p, v, why := Pin(mustLookup(t, c.PID()))
		require.Equal(t, Alive, v, why)
		done := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() { done <- p.Wait(ctx) }()
		require.NoError(t, p.Close())
		assert.ErrorIs(t, <-done, os.ErrClosed)
		assert.ErrorIs(t, p.Signal(syscall.SIGTERM), ErrNotAlive)
		assert.Nil(t, c.Cmd.ProcessState)
	})
}

// TestPinRefusesRecycledPid: a record whose pid now belongs to an unrelated
// process (simulated: a live `sleep` with other start ticks) is Stale; Pin
// refuses it, nothing is signalled and the process lives on.
func TestPinRefusesRecycledPid(t *testing.T) {
	forEachMode(t, func(t *testing.T, _ bool) {
		c := startSleep(t)
		actual := mustLookup(t, c.PID())
		recycled := actual
		recycled.StartTicks++

		recordProbes(t) // fails the test on any signal
		p, v, why := Pin(recycled)
		assert.Nil(t, p)
		assert.Equal(t, Stale, v, why)
		assert.Contains(t, why, "pid reused")

		v, why = Check(actual)
		assert.Equal(t, Alive, v, why)
		assert.NotEqual(t, byte('Z'), procState(t, c.PID()))
		assert.Nil(t, c.Cmd.ProcessState)
	})
}

// TestOtherNamespace runs a helper as pid 1 of a new pid namespace; its own
// record names pid 1 there, which here is another process.
func TestOtherNamespace(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not installed")
	}
	cmd := testharness.Command("", "unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
	var stderr testharness.LogBuffer
	cmd.Stderr = &stderr
	c := testharness.StartCmd(t, cmd, "identity")
	var line string
	select {
	case l, ok := <-c.Lines:
		if !ok {
			c.Wait()
			t.Skipf("cannot create a pid namespace here: %s", stderr.String())
		}
		line = l
	case <-time.After(testharness.Wait):
		t.Fatalf("the helper in a new pid namespace said nothing within %v", testharness.Wait)
	}
	var rec Identity
	require.NoError(t, json.Unmarshal([]byte(line), &rec))
	cur := Current()
	require.Equal(t, 1, rec.PID)
	require.Equal(t, cur.BootID, rec.BootID)
	require.NotEqual(t, cur.PIDNS, rec.PIDNS)
	require.NotZero(t, rec.StartTicks)

	probed := recordProbes(t)
	v, why := Check(rec)
	assert.Equal(t, OtherNamespace, v, why)
	p, v, _ := Pin(rec)
	assert.Nil(t, p)
	assert.Equal(t, OtherNamespace, v)
	assert.Empty(t, *probed, "decided before probing")

	// Had the namespace been ignored, pid 1 here is another process.
	blind := rec
	blind.PIDNS = cur.PIDNS
	v, why = Check(blind)
	assert.Equal(t, Stale, v, why)
}

// TestHidepid plays /proc mounted with hidepid=invisible: the entry of a
// live process is missing. That proves nothing; only an exit seen through
// the pidfd proves death.
func TestHidepid(t *testing.T) {
	forEachMode(t, func(t *testing.T, pidfd bool) {
		c := startHelper(t, "block")
		id := mustLookup(t, c.PID())
		testProcRoot.Store(new(t.TempDir()))
		t.Cleanup(func() { testProcRoot.Store(nil) })

		v, why := Check(id)
		assert.Equal(t, Unverifiable, v, why)
		assert.Contains(t, why, "hidepid")
		_, err := Lookup(c.PID())
		assert.Error(t, err)
		assert.NotErrorIs(t, err, ErrNoProcess)

		require.NoError(t, c.Cmd.Process.Signal(syscall.SIGKILL))
		waitZombie(t, c.PID())
		v, why = Check(id)
		if pidfd {
			assert.Equal(t, Dead, v, why)
		} else {
			assert.Equal(t, Unverifiable, v, "kill(pid, 0) succeeds on a zombie: %s", why)
		}
	})
}

// BenchmarkWaitWake measures SIGKILL through the pin plus the Wait that
// observes the exit: with a pidfd the poller wakes Wait at the exit; without
// one, Wait polls every 5 ms.
func BenchmarkWaitWake(b *testing.B) {
	for _, m := range []int{0, 2} { // pidfd, no pidfd
		m := probeModes[m]
		b.Run(m.name, func(b *testing.B) {
			testPidfdOpen.Store(&m.open)
			defer testPidfdOpen.Store(nil)
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				c := startSleep(b)
				p, v, why := Pin(mustLookup(b, c.PID()))
				require.Equal(b, Alive, v, why)
				b.StartTimer()
				require.NoError(b, p.Signal(syscall.SIGKILL))
				require.NoError(b, p.Wait(ctx))
				b.StopTimer()
				require.NoError(b, p.Close())
				c.Kill()
				c.Wait()
			}
		})
	}
}

// TestZombieLeaderLives: a process whose main thread has exited shows Z in
// /proc/<pid>/stat, but its other threads run: it is alive, not dead.
func TestZombieLeaderLives(t *testing.T) {
	c := startHelper(t, "leader-exit")
	deadline := time.Now().Add(10 * time.Second)
	for procState(t, c.PID()) != 'Z' {
		require.True(t, time.Now().Before(deadline), "main thread of %d did not exit", c.PID())
		time.Sleep(time.Millisecond) // nothing to block on: the process does not exit
	}
	id := mustLookup(t, c.PID())
	forEachMode(t, func(t *testing.T, _ bool) {
		v, why := Check(id)
		assert.Equal(t, Alive, v, why)
		p, v, why := Pin(id)
		require.Equal(t, Alive, v, why)
		assert.False(t, p.Exited())
		require.NoError(t, p.Close())
	})
	require.NoError(t, c.Stop())
	v, why := Check(id)
	assert.Equal(t, Dead, v, why)
}

// TestExiting: a process is exiting once every thread of it is (a killed
// process not yet reaped, the one such state a test can hold), never while
// it runs, nor when only its main thread has exited, nor for another
// process at its pid, nor once it is reaped.
func TestExiting(t *testing.T) {
	c := startHelper(t, "block")
	id := mustLookup(t, c.PID())
	reused := id
	reused.StartTicks++
	assert.False(t, Exiting(id), "alive")
	require.NoError(t, c.Cmd.Process.Signal(syscall.SIGKILL))
	waitZombie(t, c.PID())
	assert.True(t, Exiting(id), "killed, not reaped")
	assert.False(t, Exiting(reused), "another process at its pid")
	c.Wait()
	assert.False(t, Exiting(id), "reaped")

	l := startHelper(t, "leader-exit")
	deadline := time.Now().Add(10 * time.Second)
	for procState(t, l.PID()) != 'Z' {
		require.True(t, time.Now().Before(deadline), "main thread of %d did not exit", l.PID())
		time.Sleep(time.Millisecond) // nothing to block on: the process does not exit
	}
	assert.False(t, Exiting(mustLookup(t, l.PID())), "its main thread exited, its other threads run")
}
