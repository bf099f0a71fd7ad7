//go:build unix || windows

package runnerstate

import (
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

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Environment of the takeover roles.
const (
	envBehaviour = "RUNNERSTATE_TEST_BEHAVIOUR" // old runner: obey | stubborn
	envOptions   = "RUNNERSTATE_TEST_OPTIONS"   // starter: TakeoverOptions as JSON
	envWait      = "RUNNERSTATE_TEST_WAIT"      // starter: its context's timeout
)

func startRunner(t *testing.T, dir, behaviour string) *child {
	t.Setenv(envBehaviour, behaviour)
	r := startChild(t, "runner", dir)
	r.Expect("acquired")
	return r
}

func startStarter(t *testing.T, dir string, opts TakeoverOptions, wait time.Duration) *child {
	data, err := json.Marshal(opts)
	require.NoError(t, err)
	t.Setenv(envOptions, string(data))
	t.Setenv(envWait, wait.String())
	return startChild(t, "starter", dir)
}

// signalsSeen records the signals this process sends through liveness.
func signalsSeen(t *testing.T) func() []string {
	var mu sync.Mutex
	var seen []string
	restore := liveness.SetSignalHook(func(pid int, sig syscall.Signal) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, strconv.Itoa(pid)+" "+sig.String())
	})
	t.Cleanup(restore)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func TestTakeoverNoRunnerAdmitsAtOnce(t *testing.T) {
	dir := tempDir(t)
	writeJSON(t, filepath.Join(dir, RestartName), restartRequest{Mode: RestartNow, RequestedAt: time.Now().Add(-time.Minute), For: "gone"})
	release, err := Takeover(background(t), dir, TakeoverOptions{})
	require.NoError(t, err)
	rec, ok, err := Running(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, os.Getpid(), rec.PID, "admitted only with the record published")
	_, pending := RestartRequested(dir)
	assert.False(t, pending, "a stale restart request is retired")
	st, err := Status(dir)
	require.NoError(t, err)
	assert.Empty(t, st.Waiting)
	release()
}

// Case: runner.json names a live unrelated process (an idle child, in a
// process group of its own where there are groups) with a mismatched start
// identity; the lock is free. Takeover is admitted; the unrelated process
// (and its group) receives no signal and is still alive.
func TestTakeoverSparesUnrelatedProcess(t *testing.T) {
	dir := tempDir(t)
	cmd := testharness.Command("")
	ownProcessGroup(cmd)
	unrelated := startChildCmd(t, cmd, "idle")
	id, err := liveness.Lookup(unrelated.PID())
	require.NoError(t, err)
	forged := Identity(id)
	forged.StartTicks++
	forged.Instance = "00000000000000000000000000000001"
	writeJSON(t, filepath.Join(dir, RecordName), Record{PID: forged.PID, Process: forged})
	writeJSON(t, filepath.Join(dir, LockName), forged)
	sent := signalsSeen(t)

	release, err := Takeover(background(t), dir, TakeoverOptions{Grace: time.Millisecond, KillAfter: time.Millisecond})
	require.NoError(t, err)
	release()
	assert.Empty(t, sent())
	v, why := liveness.Check(id)
	assert.Equal(t, liveness.Alive, v, "the unrelated process is alive: %s", why)
}

// Case: the old runner exits promptly on "now": the new one is admitted
// without any signal being sent.
func TestTakeoverCooperative(t *testing.T) {
	dir := tempDir(t)
	old := startRunner(t, dir, "obey")
	sent := signalsSeen(t)
	start := time.Now()
	release, err := Takeover(background(t), dir, TakeoverOptions{Grace: time.Minute})
	require.NoError(t, err)
	t.Logf("takeover of a cooperative runner took %v", time.Since(start))
	old.Expect("exiting now")
	require.NoError(t, old.Wait())
	assert.Empty(t, sent(), "a cooperative runner is never signalled")
	rec, ok, _ := Running(dir)
	require.True(t, ok)
	assert.Equal(t, os.Getpid(), rec.PID)
	_, pending := RestartRequested(dir)
	assert.False(t, pending, "the restart request is consumed")
	release()
}

// Case: an old runner acknowledges the request but keeps draining and
// ignores SIGTERM. With NoSignal the starter's context ends with a busy
// error, the old runner untouched. With signals it gets SIGTERM, then SIGKILL
// after re-verification, and the starter is admitted. (Windows has no
// SIGTERM: there only the kill comes, after the same two periods.)
func TestTakeoverStubbornRunner(t *testing.T) {
	t.Run("no signal", func(t *testing.T) {
		dir := tempDir(t)
		old := startRunner(t, dir, "stubborn")
		sent := signalsSeen(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := Takeover(ctx, dir, TakeoverOptions{NoSignal: true, Grace: time.Millisecond, KillAfter: time.Millisecond})
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrBusy)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var be *BusyError
		require.ErrorAs(t, err, &be)
		assert.Equal(t, old.PID(), be.PID)
		assert.True(t, be.Verified)
		old.Expect("ack now")
		assert.Empty(t, sent())
		rec, ok, _ := Running(dir)
		require.True(t, ok, "the old runner still runs")
		assert.Equal(t, old.PID(), rec.PID)
		st, _ := Status(dir)
		assert.Empty(t, st.Waiting, "the starter withdrew")
		require.NoError(t, old.Stop())
	})
	t.Run("escalates", func(t *testing.T) {
		dir := tempDir(t)
		old := startRunner(t, dir, "stubborn")
		sent := signalsSeen(t)
		start := time.Now()
		release, err := Takeover(background(t), dir, TakeoverOptions{Grace: 300 * time.Millisecond, KillAfter: 300 * time.Millisecond})
		require.NoError(t, err)
		elapsed := time.Since(start)
		t.Logf("takeover of a runner that ignores requests and SIGTERM took %v", elapsed)
		assert.GreaterOrEqual(t, elapsed, 600*time.Millisecond, "grace and kill-after were honoured")
		old.Expect("ack now")
		pid := strconv.Itoa(old.PID())
		if !posixSignals {
			var ee *exec.ExitError
			require.ErrorAs(t, old.Wait(), &ee, "terminated")
			assert.Equal(t, []string{pid + " killed"}, sent())
		} else {
			old.Expect("term")
			err = old.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
			assert.Equal(t, []string{pid + " terminated", pid + " killed"}, sent())
		}
		assert.NoFileExists(t, filepath.Join(dir, RestartName), "the restart file is gone afterwards")
		rec, ok, _ := Running(dir)
		require.True(t, ok)
		assert.Equal(t, os.Getpid(), rec.PID)
		release()
	})
}

// Case: ten starters launched one after another against a live runner:
// exactly one ends admitted, the last one launched; nine get ErrSuperseded;
// the old runner is signalled at most once per step.
func TestTakeoverNewestStarterWins(t *testing.T) {
	dir := tempDir(t)
	old := startRunner(t, dir, "stubborn")
	// The first nine would wait an hour before signalling; the tenth, whose
	// options govern once it is the newest, only 300 ms counted from the
	// first starter's request: escalation is not postponed by the stream of
	// starters, and the old runner is signalled once per step.
	patient := TakeoverOptions{Grace: time.Hour, KillAfter: time.Hour}
	hasty := TakeoverOptions{Grace: 300 * time.Millisecond, KillAfter: 300 * time.Millisecond}
	var starters []*child
	for i := range 10 {
		opts := patient
		if i == 9 {
			opts = hasty
		}
		s := startStarter(t, dir, opts, childWait)
		starters = append(starters, s)
		eventually(t, "starter "+strconv.Itoa(i)+" waits", func() bool {
			st, err := Status(dir)
			return err == nil && len(st.Waiting) > 0 && st.Waiting[len(st.Waiting)-1].PID == s.PID()
		})
	}
	signals := map[string]int{}
	for i, s := range starters {
		var outcome string
		for {
			line := s.Expect("")
			if f := strings.Fields(line); len(f) == 3 && f[0] == "signal" {
				assert.Equal(t, strconv.Itoa(old.PID()), f[1], "only the old runner is signalled")
				signals[f[2]]++
				continue
			}
			outcome = line
			break
		}
		if i == len(starters)-1 {
			assert.Equal(t, "admitted", outcome, "the last starter wins")
		} else {
			assert.Equal(t, "superseded", outcome, "starter %d", i)
		}
	}
	if posixSignals {
		assert.Equal(t, 1, signals[strconv.Itoa(int(syscall.SIGTERM))], "SIGTERM once")
	}
	assert.Equal(t, 1, signals[strconv.Itoa(int(syscall.SIGKILL))], "SIGKILL once")
	old.Wait()
	st, err := Status(dir)
	require.NoError(t, err)
	assert.True(t, st.Verified)
	assert.Equal(t, starters[9].PID(), st.Holder.PID)
	assert.Empty(t, st.Waiting)
	for _, s := range starters {
		require.NoError(t, s.Stop())
	}
}

// Case: a starter whose context is cancelled while waiting returns promptly;
// its waiting mark and its restart request are gone; the old runner keeps
// running.
func TestTakeoverCancelledStarterWithdraws(t *testing.T) {
	dir := tempDir(t)
	// An old runner that does not watch for requests: it never acts on one.
	old := startChild(t, "acquire", dir)
	old.Expect("acquired")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Takeover(ctx, dir, TakeoverOptions{Grace: time.Minute})
		done <- err
	}()
	eventually(t, "the starter waits and asked for a restart", func() bool {
		st, err := Status(dir)
		return err == nil && len(st.Waiting) == 1 && st.Restart == RestartNow
	})
	start := time.Now()
	cancel()
	err := <-done
	t.Logf("a cancelled starter returned after %v", time.Since(start))
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrBusy)
	st, err := Status(dir)
	require.NoError(t, err)
	assert.Empty(t, st.Waiting)
	assert.Empty(t, st.Restart, "the starter's own request is withdrawn")
	assert.True(t, st.Verified)
	assert.Equal(t, old.PID(), st.Holder.PID, "the old runner keeps running")
	require.NoError(t, old.Stop())
}

// A takeover that gives up withdraws only what it wrote: an operator's
// request made while it waited stands (as strong as the takeover's, which
// it joins, or weaker, which the takeover upgraded), and the runner still
// reads it.
func TestTakeoverGivingUpLeavesAnOperatorsRequest(t *testing.T) {
	cases := []struct{ operator, takeover string }{
		{RestartDrain, RestartDrain}, // the operator's request joins the takeover's
		{RestartDrain, RestartNow},   // the takeover upgrades the operator's
		{RestartNow, RestartDrain},   // the operator's upgrades the takeover's
	}
	for _, c := range cases {
		t.Run(c.operator+" during "+c.takeover, func(t *testing.T) {
			dir := tempDir(t)
			// An old runner that does not watch for requests, as a frozen one.
			old := startChild(t, "acquire", dir)
			old.Expect("acquired")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			operatorFirst := c.operator != c.takeover && c.takeover == RestartNow
			if operatorFirst {
				require.NoError(t, RequestRestart(dir, c.operator))
			}
			go func() {
				_, err := Takeover(ctx, dir, TakeoverOptions{Mode: c.takeover, Grace: time.Minute})
				done <- err
			}()
			eventually(t, "the starter waits and asked for a restart", func() bool {
				st, err := Status(dir)
				return err == nil && len(st.Waiting) == 1 && st.Restart == c.takeover
			})
			if !operatorFirst {
				require.NoError(t, RequestRestart(dir, c.operator))
			}
			cancel()
			assert.ErrorIs(t, <-done, context.Canceled)
			st, err := Status(dir)
			require.NoError(t, err)
			assert.Empty(t, st.Waiting)
			assert.Equal(t, c.operator, st.Restart, "the operator's request stands")
			mode, ok := RestartRequested(dir)
			assert.True(t, ok)
			assert.Equal(t, c.operator, mode, "and the runner reads it")
			require.NoError(t, old.Stop())
		})
	}
}

func TestTakeoverBadMode(t *testing.T) {
	_, err := Takeover(background(t), tempDir(t), TakeoverOptions{Mode: "later"})
	assert.ErrorIs(t, err, ErrBadMode)
}

func TestTakeoverUnverifiableHolderIsNeverSignalled(t *testing.T) {
	dir := tempDir(t)
	old := startChild(t, "acquire", dir)
	old.Expect("acquired")
	// An older runner wrote only its bare pid: it holds the lock, but its
	// identity cannot be verified. (Windows: its lock file carries nothing,
	// and the holder is named from runner.json, which an older runner wrote
	// without an identity.)
	if lockFileReadable {
		require.NoError(t, os.WriteFile(filepath.Join(dir, LockName), []byte(strconv.Itoa(old.PID())+"\n"), 0o644))
		// Nor did its record name the descriptor it locked through.
		rec, ok, err := Running(dir)
		require.NoError(t, err)
		require.True(t, ok)
		rec.LockFD = 0
		writeJSON(t, filepath.Join(dir, RecordName), rec)
	} else {
		writeJSON(t, filepath.Join(dir, RecordName), Record{PID: old.PID()})
	}
	sent := signalsSeen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := Takeover(ctx, dir, TakeoverOptions{Grace: time.Millisecond, KillAfter: time.Millisecond})
	assert.ErrorIs(t, err, ErrBusy)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var be *BusyError
	require.ErrorAs(t, err, &be)
	if lockFileReadable {
		assert.Equal(t, old.PID(), be.PID, "named from the lock file, unverified")
	}
	assert.False(t, be.Verified)
	assert.Empty(t, sent())
	require.NoError(t, old.Stop())
}

func TestStandby(t *testing.T) {
	t.Run("no holder", func(t *testing.T) {
		res, err := Standby(background(t), tempDir(t), StandbyOptions{})
		require.NoError(t, err)
		assert.Equal(t, StandbyResult{Resumed: true}, res)
	})
	t.Run("holder exits", func(t *testing.T) {
		dir := tempDir(t)
		holder := startChild(t, "acquire", dir)
		holder.Expect("acquired")
		logs := captureLog(t)
		got := make(chan StandbyResult, 1)
		go func() {
			res, err := Standby(background(t), dir, StandbyOptions{Interval: time.Hour})
			assert.NoError(t, err)
			got <- res
		}()
		eventually(t, "standby names the holder", func() bool { return strings.Contains(logs.String(), "standing by") })
		holder.Kill()
		holder.Wait()
		res := <-got
		assert.Equal(t, StandbyResult{Resumed: true, PreviousOwnerPID: holder.PID()}, res)
		assert.Equal(t, 1, strings.Count(logs.String(), "standing by"), "logged once")
	})
	t.Run("work completed", func(t *testing.T) {
		dir := tempDir(t)
		holder := startChild(t, "acquire", dir)
		holder.Expect("acquired")
		var mu sync.Mutex
		done := false
		go func() {
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			done = true
			mu.Unlock()
		}()
		res, err := Standby(background(t), dir, StandbyOptions{Interval: 5 * time.Millisecond, WorkIsComplete: func() bool {
			mu.Lock()
			defer mu.Unlock()
			return done
		}})
		require.NoError(t, err)
		assert.Equal(t, StandbyResult{PreviousOwnerPID: holder.PID(), WorkCompleted: true}, res)
		require.NoError(t, holder.Stop())
	})
	t.Run("context ends", func(t *testing.T) {
		dir := tempDir(t)
		holder := startChild(t, "acquire", dir)
		holder.Expect("acquired")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := Standby(ctx, dir, StandbyOptions{})
		assert.ErrorIs(t, err, ErrBusy)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, holder.Stop())
	})
}

// Starters launched at the same instant on a free directory: one ends as the
// verified runner, and no restart request is left pending for it (a request
// aimed at a starter caught between taking the lock and writing its identity
// is not kept for the runner admitted next, which would then stop at once).
func TestTakeoverSimultaneousStartersLeaveARunner(t *testing.T) {
	for round := range 3 {
		dir := tempDir(t)
		var starters []*child
		for range 8 {
			starters = append(starters, startStarter(t, dir, TakeoverOptions{Grace: 200 * time.Millisecond, KillAfter: 200 * time.Millisecond}, childWait))
		}
		admitted := 0
		for _, s := range starters {
			for {
				line := s.Expect("")
				if strings.HasPrefix(line, "signal ") {
					continue
				}
				if line == "admitted" {
					admitted++
				} else {
					assert.Equal(t, "superseded", line, "round %d", round)
				}
				break
			}
		}
		require.GreaterOrEqual(t, admitted, 1, "round %d: someone is admitted", round)
		st, err := Status(dir)
		require.NoError(t, err)
		assert.True(t, st.Held && st.Verified, "round %d: a verified runner holds the dir: %+v", round, st)
		assert.Empty(t, st.Restart, "round %d: no restart request is left for the admitted runner", round)
		for _, s := range starters {
			s.Stop()
		}
	}
}

func TestTakeoverOfItsOwnDirIsBusyAtOnce(t *testing.T) {
	dir := tempDir(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	start := time.Now()
	_, err = Takeover(background(t), dir, TakeoverOptions{})
	var be *BusyError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, os.Getpid(), be.PID)
	assert.Less(t, time.Since(start), childWait/2, "no wait on itself")
}

// Case (the chaos soak, where a newer starter signalled one that held the
// lock but had not been admitted yet): a starter that holds the kernel lock
// while it waits for the previous runner's process to exit is never
// signalled, whatever the newer starter's grace period; the newer starter
// supersedes it and is admitted.
func TestTakeoverNeverSignalsAStarterBeingAdmitted(t *testing.T) {
	dir := tempDir(t)
	old := startRunner(t, dir, "linger")
	first := startStarter(t, dir, TakeoverOptions{Grace: time.Hour, KillAfter: childWait}, childWait)
	old.Expect("released")
	awaitHolder(t, "the first starter holds the kernel lock, awaiting the old runner's exit", filepath.Join(dir, LockName), first.PID())
	hasty := startStarter(t, dir, TakeoverOptions{Grace: time.Millisecond, KillAfter: time.Millisecond}, childWait)
	eventually(t, "the newer starter has looked at the holder and asked", func() bool {
		req, ok := readRestart(dir)
		return ok && req.By.PID == hasty.PID()
	})
	st, err := Status(dir)
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.False(t, st.Verified, "a starter being admitted cannot be verified yet")
	if kernelNamesHolders {
		assert.Equal(t, first.PID(), st.Holder.PID, "the kernel names it")
	}
	require.NoError(t, old.Stop())
	assert.Equal(t, "superseded", first.Expect(""), "the admitting starter is no longer the newest")
	assert.Equal(t, "admitted", hasty.Expect(""), "the newer starter signals nobody and is admitted")
	require.NoError(t, first.Stop())
	require.NoError(t, hasty.Stop())
}

// Case: a starter whose context ends while it holds the lock and awaits the
// previous runner's exit is not admitted: the hold is let go, and it returns
// the busy answer wrapping the context's error. Nothing of it stays in dir.
func TestTakeoverContextEndsDuringAdmission(t *testing.T) {
	dir := tempDir(t)
	old := startRunner(t, dir, "linger")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		release, err := Takeover(ctx, dir, TakeoverOptions{Grace: time.Hour, KillAfter: childWait})
		if err == nil {
			release()
		}
		done <- err
	}()
	old.Expect("released")
	awaitHolder(t, "the starter holds the kernel lock, awaiting the old runner's exit", filepath.Join(dir, LockName), os.Getpid())
	// Held by the starter itself, not by the parked goroutine on its way to
	// hand it over: cancelling then would end a wait, not an admission.
	eventually(t, "the lock is handed off to the starter", func() bool { return filelock.Parked() == 0 })
	cancel()
	err := <-done
	assert.ErrorIs(t, err, ErrBusy)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "was let go as soon as it was taken")
	_, running, err := Running(dir)
	require.NoError(t, err)
	assert.False(t, running, "the hold was let go")
	assert.NoFileExists(t, filepath.Join(dir, RecordName))
	st, err := Status(dir)
	require.NoError(t, err)
	assert.Empty(t, st.Waiting)
	require.NoError(t, old.Stop())
}

// Case: a drain asked with no Grace waits for the runner and is never
// escalated, however long it takes; RestartNow keeps DefaultGrace, and a
// Grace that is set escalates a drain too.
func TestDrainWithNoGraceWaitsForTheDrain(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hourLater := t0.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		opts    TakeoverOptions
		wantSig liveness.Signal
	}{
		{"drain, no grace", TakeoverOptions{Mode: RestartDrain}, 0},
		{"now, no grace", TakeoverOptions{Mode: RestartNow}, liveness.SIGTERM},
		{"default mode, no grace", TakeoverOptions{}, liveness.SIGTERM},
		{"drain, explicit grace", TakeoverOptions{Mode: RestartDrain, Grace: time.Minute}, liveness.SIGTERM},
	} {
		o := tc.opts.withDefaults()
		grace := graceFor(o, runnerLockHeld, occVerified)
		sig, _ := escalate(gateEscalation{FirstRequestAt: t0}, hourLater, grace, o.KillAfter)
		assert.Equal(t, tc.wantSig, sig, tc.name)
		if tc.wantSig != 0 {
			sig, _ = escalate(gateEscalation{FirstRequestAt: t0}, t0.Add(time.Second), grace, o.KillAfter)
			assert.Zero(t, sig, "%s: not before its grace", tc.name)
		}
	}
	assert.Equal(t, DefaultGrace, graceFor(TakeoverOptions{}.withDefaults(), runnerLockHeld, occVerified))
}

// Case: a superseded starter's error names the directory and the newer
// starter, and is still ErrSuperseded.
func TestSupersededNamesTheDirectoryAndTheNewerStarter(t *testing.T) {
	dir := tempDir(t)
	self := Self()
	require.NoError(t, updateGate(context.Background(), dir, func(g *gateState) error {
		g.Seq = 2
		g.Waiting = []gateEntry{{Seq: 1, Starter: liveness.Identity(self)}, {Seq: 2, Starter: liveness.Identity(self)}}
		return nil
	}))
	err := (&takeover{dir: dir, seq: 1}).superseded()
	require.ErrorIs(t, err, ErrSuperseded)
	assert.ErrorContains(t, err, dir)
	assert.ErrorContains(t, err, "pid "+strconv.Itoa(self.PID)+" started after this one")
}

// Case: a Takeover whose context has already ended, on a directory whose
// gate.json cannot be written (a directory stands there): the answer is
// that error, naming the path, not a busy one.
func TestTakeoverEndedContextReportsTheGateError(t *testing.T) {
	dir := tempDir(t)
	gate := filepath.Join(dir, gateName)
	require.NoError(t, os.Mkdir(gate, 0o755))
	_, err := Takeover(cancelled(), dir, TakeoverOptions{})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrBusy)
	assert.ErrorContains(t, err, gate)
}

// Case: the directory is free, but a Takeover starter verified alive waits
// in the gate (the instant between the old runner's exit and its
// admission). Standby yields to it instead of resuming; once that starter
// is gone it resumes (a dead starter's entry holds nobody back).
func TestStandbyYieldsToAWaitingStarter(t *testing.T) {
	dir := tempDir(t)
	starter := startChildCmd(t, testharness.Command(""), "idle")
	id, err := liveness.Lookup(starter.PID())
	require.NoError(t, err)
	require.NoError(t, updateGate(context.Background(), dir, func(g *gateState) error {
		g.Seq = g.Next()
		g.Waiting = append(g.Waiting, gateEntry{Seq: g.Seq, Starter: id, Since: time.Now()})
		return nil
	}))
	captureLog(t)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	res, err := Standby(ctx, dir, StandbyOptions{})
	cancel()
	assert.ErrorIs(t, err, ErrBusy, "a standby waits while a live starter is being admitted")
	assert.False(t, res.Resumed)

	done := make(chan StandbyResult, 1)
	go func() {
		res, _ := Standby(background(t), dir, StandbyOptions{})
		done <- res
	}()
	starter.Kill()
	starter.Wait()
	select {
	case res := <-done:
		assert.True(t, res.Resumed, "the starter is gone: resumed")
	case <-time.After(childWait):
		t.Fatalf("Standby did not resume within %v of the waiting starter's exit", childWait)
	}
}

// registered is a takeover of dir as Takeover makes one, with the defaults,
// registered in the gate.
func registered(t *testing.T, dir string, live bool) *takeover {
	t.Helper()
	opts := TakeoverOptions{}.withDefaults()
	tk := &takeover{dir: dir, lockPath: filepath.Join(dir, LockName), opts: opts, start: time.Now(), self: Self(), log: opts.Logger, live: live}
	require.NoError(t, tk.register(context.Background()))
	t.Cleanup(tk.unpin)
	return tk
}

// Case: a pair lost in admission (a lock file deleted after the starter
// was recorded admitted, before its record was published) is taken again,
// maxLost times at most; after that run answers with the count.
func TestRunTakesThePairAgainWhenAdmissionLostIt(t *testing.T) {
	if !removeOpenFiles {
		t.Skip("a held lock file cannot be removed here")
	}
	dir := tempDir(t)
	lose, admitted := 0, 0
	hook := func(d string) {
		if d != dir {
			return
		}
		admitted++
		if lose > 0 {
			lose--
			require.NoError(t, os.Remove(filepath.Join(dir, LockName)))
		}
	}
	testHookAdmitting.Store(&hook)
	t.Cleanup(func() { testHookAdmitting.Store(nil) })

	lose = maxLost
	h, err := registered(t, dir, true).run(background(t))
	require.NoError(t, err)
	assert.Equal(t, maxLost+1, admitted)
	h.Release()

	lose, admitted = maxLost+1, 0
	_, err = registered(t, dir, true).run(background(t))
	require.ErrorContains(t, err, fmt.Sprintf("its lock files were deleted or replaced %d times while being taken", maxLost+1))
	assert.Equal(t, maxLost+1, admitted)
}

// Case: with ctx already ended and the pair held, run answers a *BusyError
// wrapping ctx's error, and takes no step: no escalation in the gate, no
// request left.
func TestAnEndedContextGetsOneTryAndNoStep(t *testing.T) {
	dir := tempDir(t)
	tk := registered(t, dir, false)
	l, err := filelock.TryLock(filepath.Join(dir, LockName), filelock.Exclusive, 0o600)
	require.NoError(t, err)
	defer l.Release()
	_, err = tk.run(cancelled())
	require.ErrorIs(t, err, ErrBusy)
	require.ErrorIs(t, err, context.Canceled)
	g, _ := readGate(dir)
	assert.Nil(t, g.Escalation, "no step")
	assert.NoFileExists(t, filepath.Join(dir, RestartName))
}

// Case: a starter admitted after this one ends the wait with ErrSuperseded,
// before any step.
func TestANewerStarterSupersedesBeforeAnyStep(t *testing.T) {
	dir := tempDir(t)
	tk := registered(t, dir, true)
	require.NoError(t, updateGate(context.Background(), dir, func(g *gateState) error {
		g.Admitted = tk.seq + 1
		return nil
	}))
	l, err := filelock.TryLock(filepath.Join(dir, LockName), filelock.Exclusive, 0o600)
	require.NoError(t, err)
	defer l.Release()
	_, err = tk.run(background(t))
	require.ErrorIs(t, err, ErrSuperseded)
	g, _ := readGate(dir)
	assert.Nil(t, g.Escalation, "no step")
	assert.NoFileExists(t, filepath.Join(dir, RestartName))
}
