//go:build linux

package runnerstate

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/spawn"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Start's files in the fault matrix (stress_faults_linux_test.go): start.lock,
// start.json and runner.log, written by the caller ("start") and by the
// runner's first Publish, which marks its attempt ready ("start-mark").

func init() {
	faultOps = append(faultOps,
		&faultOp{name: "start", seed: seedNothing, plans: startPlans, check: checkStart, after: afterStart},
		&faultOp{name: "start-mark", seed: seedNothing, env: markEnv, plans: markPlans, check: checkMark},
	)
	faultRuns["start"] = faultRun{run: func(st *faultState) error {
		ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
		defer cancel()
		_, err := Start(ctx, st.root, startedRunner(st.root, "ready"), StartOptions{})
		return err
	}}
	faultRuns["start-mark"] = faultRun{
		// The runner an attempt started, as it stands just before its
		// first Publish: it holds the directory, and start.json names it
		// as the attempt's process, still pending.
		setup: func(st *faultState) error {
			r, err := Acquire(st.root)
			if err != nil {
				return err
			}
			st.release = r
			child, err := liveness.Lookup(os.Getpid()) // as Start records its child
			if err != nil {
				return err
			}
			return writeAttempt(st.root, startAttempt{Seq: 1, By: liveness.Current(), Child: child, Began: time.Now(), ExitCode: -1})
		},
		run: func(st *faultState) error { return Publish(st.root, faultRecord("v1")) },
	}
}

// startPlans plans a Start's cells on its path up to the release of
// start.lock: after it, Start waits for the runner it started, and looks at
// the directory as often as the runner's own writes wake it, which its
// timing decides.
func startPlans() func(call straceCall) (plan, stop bool) {
	released := false
	return func(call straceCall) (bool, bool) {
		if released {
			return false, true
		}
		released = call.class == "close(lock)" && call.path == "$D/"+startLockName
		return true, false
	}
}

// markEnv says to the helper it was started for root by an attempt, as
// Start's child is told (spawn.ReadyForEnv), with no descriptor to write.
func markEnv(root string) []string { return []string{spawn.ReadyForEnv + "=" + root} }

// markPlans plans start-mark's cells from its first call on start.lock:
// MarkReady's, after Publish's own (the "publish" operation's cells).
func markPlans() func(call straceCall) (plan, stop bool) {
	marking := false
	return func(call straceCall) (bool, bool) {
		marking = marking || call.path == "$D/"+startLockName
		return marking, false
	}
}

// checkStart: a Start that failed named the path (checkFaultOutcome) and
// left nothing held by the caller; one that succeeded left a ready runner,
// another process, holding the directory.
func checkStart(t *testing.T, c *faultCase, o *faultOutcome) {
	t.Helper()
	expectLocks(t, o, nil)
	assert.False(t, o.res.Holds, "the caller of Start never holds the directory")
	checkKept(t, c.root)
	for _, name := range []string{startName, RecordName, gateName} {
		assertNotTorn(t, filepath.Join(c.root, name))
	}
	if o.res.Err != "" {
		return
	}
	rec, running, err := Running(c.root)
	require.NoError(t, err)
	assert.True(t, running, "a Start that succeeded leaves the runner running")
	assert.True(t, rec.Ready, "and ready")
	assert.NotEqual(t, o.pid, rec.PID, "a runner of its own, not the caller")
}

// afterStart: once the caller is gone, a Start with no fault finds the
// runner the faulted Start started, or starts one: never two.
func afterStart(t *testing.T, c *faultCase, o *faultOutcome) {
	t.Helper()
	stopStarted(t, c.root)
	before := spawnedIDs(c.root)
	ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
	defer cancel()
	rec, err := Start(ctx, c.root, startedRunner(c.root, "ready"), StartOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err, "a later Start succeeds")
	if o.res.Err == "" {
		assert.Equal(t, before, spawnedIDs(c.root), "it finds the runner started, and starts none")
	}
	var live []int
	for _, id := range spawnedIDs(c.root) {
		if p, _, _ := liveness.Pin(liveness.Identity(id)); p != nil {
			live = append(live, id.PID)
			p.Close()
		}
	}
	assert.Equal(t, []int{rec.PID}, live, "one runner lives, the one Start returned")
	// The runner may still be writing its ready mark (a temporary file of
	// start.json that is a live writer's): it goes before the next writer
	// looks, as a writer killed mid-write would.
	killStarted(t, c.root)
}

// checkMark: a mark that could not be written is logged, and never fails
// Publish; the runner is ready, and a later Start finds it so.
func checkMark(t *testing.T, c *faultCase, o *faultOutcome) {
	t.Helper()
	assert.Empty(t, o.res.Err, "a failed mark never fails Publish")
	expectLocks(t, o, holdsDir)
	assert.True(t, o.res.Holds)
	assertNotTorn(t, filepath.Join(c.root, startName))
	a, ok := readAttempt(c.root)
	assert.True(t, ok, "the attempt record is never dropped")
	if !a.Ready {
		assert.Contains(t, o.res.Log, "could not record in the start attempt that this runner is ready", "a mark not written is logged")
	}
	stopStarted(t, c.root)
	ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
	defer cancel()
	rec, err := Start(ctx, c.root, startedRunner(c.root, "ready"), StartOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err, "a later Start finds the runner ready")
	assert.Equal(t, o.pid, rec.PID, "the runner that published")
	assert.Empty(t, spawnedIDs(c.root), "and starts none")
}
