package runnerstate

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Lingering, played with real processes: a server that steps down (the
// "lingerer" role) beside starters, reapers and writers in the test.

// envKillAt is the lingerer's kill_at, as a duration from the moment it
// steps down (default an hour).
const envKillAt = "RUNNERSTATE_TEST_KILL_AT"

func init() { registerRole("lingerer", roleLingerer) }

// lingerer: a server of dir that lingers. With RUNNERSTATE_TEST_BEHAVIOUR
// "bare" it only writes linger.json (WriteLingering) and says "lingering";
// otherwise it Acquires and Publishes dir, says "acquired", and on a
// restart request writes linger.json ("retaking" also marks it retaking),
// lets dir go and says "lingering", as package daemon's server steps down.
// Then, until stdin closes: "ping" says "pong" (it still serves); "retake"
// says "retaken" (holding dir again) or "refused <err>"; "write" says
// "wrote" or "refused <err>". At EOF it removes its linger.json and exits.
func roleLingerer(dir string) int {
	behaviour := os.Getenv(envBehaviour)
	killAfter := time.Hour
	if s := os.Getenv(envKillAt); s != "" {
		killAfter, _ = time.ParseDuration(s)
	}
	cmds := commands()
	step := func() error {
		now := time.Now()
		return WriteLingering(dir, Lingering{Since: now, Deadline: now.Add(killAfter / 2), KillAt: now.Add(killAfter), Open: 1, Retaking: behaviour == "retaking"})
	}
	if behaviour == "bare" {
		if err := step(); err != nil {
			say("error %v", err)
			return 1
		}
	} else {
		release, ok := acquirePublished(dir, Record{Specs: []string{"old"}})
		if !ok {
			return 1
		}
		ctx, cancel := context.WithCancel(context.Background())
		restarts := WatchRestart(ctx, dir)
		say("acquired")
		<-restarts
		cancel()
		err := step()
		release()
		if err != nil {
			say("error %v", err)
			return 1
		}
	}
	say("lingering")
	var held func()
	for cmd := range cmds {
		var err error
		switch cmd {
		case "ping":
			say("pong")
			continue
		case "retake":
			if held, err = Retake(dir, Record{Specs: []string{"old"}}); err == nil {
				say("retaken")
				continue
			}
		case "write":
			if err = step(); err == nil {
				say("wrote")
				continue
			}
		}
		say("refused %v", err)
	}
	if held != nil {
		held()
	}
	if err := RemoveLingering(dir); err != nil {
		say("error %v", err)
		return 1
	}
	return 0
}

// startLingerer starts a lingerer of dir with behaviour and kill_at
// (0: the role's default).
func startLingerer(t *testing.T, dir, behaviour string, killAt time.Duration) *child {
	t.Helper()
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), envBehaviour+"="+behaviour)
	if killAt != 0 {
		cmd.Env = append(cmd.Env, envKillAt+"="+killAt.String())
	}
	return startChildCmd(t, cmd, "lingerer")
}

// exitOf waits, at most childWait, for c to exit, and returns how it
// ended.
func exitOf(t *testing.T, c *child) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(childWait):
		c.Kill()
		<-done
		t.Fatalf("child %d did not exit within %v", c.PID(), childWait)
	}
	return nil
}

// takeoverAsync runs a Takeover of dir in a goroutine (asking a drain,
// never signalling, and waiting up to an hour for the previous holder's
// exit: the test ends long before) and delivers its error; the hold is
// released when the test ends.
func takeoverAsync(t *testing.T, dir string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		release, err := Takeover(background(t), dir, TakeoverOptions{Mode: RestartDrain, Grace: time.Hour, KillAfter: time.Hour})
		if err == nil {
			t.Cleanup(release)
		}
		done <- err
	}()
	return done
}

// A takeover whose pinned holder let go and wrote linger.json is admitted
// without waiting for that process's exit: Takeover returns while it is
// alive (and still serving), long before KillAfter (an hour; the harness
// gives up after childWait).
func TestTakeoverDoesNotWaitForALingeringHolder(t *testing.T) {
	dir := tempDir(t)
	old := startLingerer(t, dir, "", 0)
	old.Expect("acquired")
	done := takeoverAsync(t, dir)
	old.Expect("lingering")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-old.Lines:
		t.Fatal("the lingering server exited first")
	case <-time.After(childWait):
		t.Fatalf("not admitted within %v: the takeover waits for the lingering server's exit", childWait)
	}
	require.True(t, alive(old.PID()), "admitted while the previous holder lives")
	old.Send("ping")
	old.Expect("pong")
	l, ok, err := ReadLingering(dir)
	require.NoError(t, err)
	require.True(t, ok, "the lingering server's record stays while it lives")
	assert.Equal(t, old.PID(), l.Holder.PID)
	rec := recordNow(t, dir)
	assert.Equal(t, os.Getpid(), rec.PID, "the starter holds dir")
	r, err := Status(dir)
	require.NoError(t, err)
	require.NotNil(t, r.Lingering)
	assert.Equal(t, old.PID(), r.Lingering.Holder.PID)
	require.NoError(t, old.Stop())
	_, ok, _ = ReadLingering(dir)
	assert.False(t, ok, "removed by its server as it ends")
}

// Without linger.json (a holder that lets go and lives on, as an older
// build's or one that does not linger), or with one that says it is
// retaking, the takeover waits for the previous holder's exit, as before.
func TestTakeoverWaitsForAHolderThatDoesNotLinger(t *testing.T) {
	for _, tc := range []struct{ name, role string }{{"no linger.json", "runner"}, {"retaking", "lingerer"}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tempDir(t)
			var old *child
			if tc.role == "runner" {
				old = startRunner(t, dir, "linger")
			} else {
				old = startLingerer(t, dir, "retaking", 0)
				old.Expect("acquired")
			}
			done := takeoverAsync(t, dir)
			if tc.role == "runner" {
				old.Expect("released")
			} else {
				old.Expect("lingering")
			}
			awaitHolder(t, "the starter holds the kernel lock, awaiting the old holder's exit", filepath.Join(dir, LockName), os.Getpid())
			select {
			case err := <-done:
				t.Fatalf("admitted while the previous holder lives: %v", err)
			default:
			}
			require.True(t, alive(old.PID()))
			old.CloseStdin()
			require.NoError(t, <-done, "admitted once it exited")
			require.NoError(t, old.Wait())
		})
	}
}

// Retake, by a real lingering process: refused while a live starter waits
// in the gate, and while another process holds dir; admitted when dir is
// free and nobody waits, its record published ready and linger.json gone.
func TestRetakeByALingeringServer(t *testing.T) {
	dir := tempDir(t)
	old := startLingerer(t, dir, "", 0)
	old.Expect("acquired")
	require.NoError(t, RequestRestart(dir, RestartDrain))
	old.Expect("lingering")

	// A live waiting starter (a real process, as the gate lists it).
	waiter := startChild(t, "idle", "")
	id, err := liveness.Lookup(waiter.PID())
	require.NoError(t, err)
	require.NoError(t, updateGate(background(t), dir, func(g *gateState) error {
		g.JoinAs(gate.Entry{Starter: id, Since: time.Now(), Linger: true})
		return nil
	}))
	old.Send("retake")
	refusal := old.Expect("refused")
	assert.Contains(t, refusal, "starter pid "+strconv.Itoa(waiter.PID())+" waits for it")
	_, ok, _ := ReadLingering(dir)
	assert.True(t, ok, "still lingering")
	_, running, err := Running(dir)
	require.NoError(t, err)
	assert.False(t, running)

	// The starter gone: the gate lists nobody live (a dead starter never
	// blocks); another process holds dir.
	waiter.Kill()
	waiter.Wait()
	holder := startChild(t, "acquire", dir)
	holder.Expect("acquired")
	old.Send("retake")
	assert.Contains(t, old.Expect("refused"), LockName, "held: a busy answer naming the lock")
	require.NoError(t, holder.Stop())

	old.Send("retake")
	old.Expect("retaken")
	rec := recordNow(t, dir)
	assert.Equal(t, old.PID(), rec.PID)
	assert.True(t, rec.Ready)
	assert.Empty(t, rec.Leaving)
	_, ok, _ = ReadLingering(dir)
	assert.False(t, ok, "removed by Retake")
	g, _ := readGate(dir)
	assert.Empty(t, g.Waiting)
	require.NoError(t, old.Stop())
	_, running, err = Running(dir)
	require.NoError(t, err)
	assert.False(t, running, "released as it exits")
}

// ReapLingering kills a lingering process alive past its kill_at (seen by
// its exit) and removes its record; it removes the record of one killed
// otherwise; it leaves one whose kill_at is ahead, and says when that is.
func TestReapLingering(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	old := startLingerer(t, dir, "bare", time.Hour)
	old.Expect("lingering")
	l, _, _ := ReadLingering(dir)
	next := ReapLingering(dir)
	assert.True(t, next.Equal(l.KillAt), "the kill_at ahead: %v, want %v", next, l.KillAt)
	require.True(t, alive(old.PID()))
	old.Kill()
	old.Wait()
	assert.True(t, ReapLingering(dir).IsZero())
	_, ok, _ := ReadLingering(dir)
	assert.False(t, ok, "the record of a gone process is removed")

	late := startLingerer(t, dir, "bare", -time.Second)
	late.Expect("lingering")
	assert.True(t, ReapLingering(dir).IsZero())
	err := exitOf(t, late)
	var ee interface{ ExitCode() int }
	require.ErrorAs(t, err, &ee, "killed")
	assert.Equal(t, -1, ee.ExitCode(), "ended by a signal: %v", err)
	_, ok, _ = ReadLingering(dir)
	assert.False(t, ok, "its record removed")
}

// A Takeover's admission reaps a lingering server past its kill_at.
func TestTakeoverReapsALingeringServerPastKillAt(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	late := startLingerer(t, dir, "bare", -time.Second)
	late.Expect("lingering")
	release, err := Takeover(background(t), dir, TakeoverOptions{})
	require.NoError(t, err)
	defer release()
	require.Error(t, exitOf(t, late), "killed at admission")
	_, ok, _ := ReadLingering(dir)
	assert.False(t, ok)
}

// EndLingering sets end "now" in the record of a live lingering process;
// WriteLingering refuses while it lingers and replaces its record once it
// is gone; the lingering process rewrites its own record, keeping end.
func TestEndAndWriteBesideALingeringServer(t *testing.T) {
	dir := tempDir(t)
	old := startLingerer(t, dir, "bare", 0)
	old.Expect("lingering")
	err := WriteLingering(dir, Lingering{})
	require.ErrorIs(t, err, ErrLingering)
	assert.Contains(t, err.Error(), "pid "+strconv.Itoa(old.PID()))

	l, ok, err := EndLingering(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, old.PID(), l.Holder.PID)
	assert.Equal(t, LingerEndNow, l.End)
	got, _, _ := ReadLingering(dir)
	assert.Equal(t, LingerEndNow, got.End)
	old.Send("write")
	old.Expect("wrote")
	got, _, _ = ReadLingering(dir)
	assert.Equal(t, LingerEndNow, got.End, "kept by its own rewrite")

	old.Kill()
	old.Wait()
	require.NoError(t, WriteLingering(dir, Lingering{}))
	got, _, _ = ReadLingering(dir)
	assert.Equal(t, os.Getpid(), got.Holder.PID)
	assert.Empty(t, got.End)
	require.NoError(t, RemoveLingering(dir))
}

// A linger.json another user owns is void: read as absent, never acted on
// (a process it names past its kill_at is not killed); Status names it,
// and the writers refuse the directory, as for any state file of another
// user's.
func TestLingeringOwnedByAnotherUserIsVoid(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	captureLog(t)
	dir := tempDir(t)
	victim := startChild(t, "idle", "")
	id, err := liveness.Lookup(victim.PID())
	require.NoError(t, err)
	writeLingerFile(t, dir, Lingering{Holder: Identity(id), KillAt: time.Now().Add(-time.Hour)})
	require.NoError(t, os.Chown(filepath.Join(dir, LingerName), mallory, mallory))
	_, ok, err := ReadLingering(dir)
	require.NoError(t, err)
	assert.False(t, ok, "another user's: absent")
	r, err := Status(dir)
	require.NoError(t, err)
	assert.Nil(t, r.Lingering)
	assert.Contains(t, strings.Join(r.Warnings, "\n"), filepath.Join(dir, LingerName), "Status names the stranger's file")
	assert.True(t, ReapLingering(dir).IsZero())
	require.True(t, alive(victim.PID()), "never signalled")
	// The writers refuse the directory, naming the file, as they refuse
	// one with any state file another user owns.
	_, _, err = EndLingering(dir)
	require.ErrorIs(t, err, ErrUntrustedDir)
	assert.Contains(t, err.Error(), filepath.Join(dir, LingerName))
	require.ErrorIs(t, WriteLingering(dir, Lingering{}), ErrUntrustedDir)
	require.True(t, alive(victim.PID()))
	victim.Kill()
	victim.Wait()
}
