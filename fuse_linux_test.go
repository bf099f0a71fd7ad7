package runnerstate

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bindfsViews is testharness.BindfsViews: two bindfs views of one real
// directory, unmounted when the test ends; it skips where FUSE cannot be
// mounted.
func bindfsViews(t *testing.T, subtype string) (real, a, b string) {
	t.Helper()
	return testharness.BindfsViews(t, subtype)
}

// By default every lock through a FUSE view is refused, named as mountinfo
// names the view, before anything is created, and nothing is left held.
func TestFuseViewsRefusedByDefault(t *testing.T) {
	real, a, _ := bindfsViews(t, "bindfs")
	dir := filepath.Join(a, "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	assertRefusedEverywhere(t, dir, "fuse.bindfs")
	entries, err := os.ReadDir(filepath.Join(real, "d"))
	require.NoError(t, err)
	for _, e := range entries {
		assert.True(t, e.IsDir(), "%s was created through a view", e.Name())
	}

	// The real path, a local disk, admits.
	release, err := Acquire(filepath.Join(real, "d"))
	require.NoError(t, err)
	release()
}

// bindfs without a subtype is "fuse" in mountinfo, and named so.
func TestFuseViewPlainTypeNamed(t *testing.T) {
	_, a, _ := bindfsViews(t, "")
	_, err := Acquire(filepath.Join(a, "d"))
	require.ErrorIs(t, err, ErrLockingUnsupported)
	assert.Contains(t, err.Error(), "is on fuse,")
	assert.Contains(t, err.Error(), "RUNNERSTATE_TRUST_FS=fuse ")
}

// With fuse.bindfs opted in, a runner (a child process) holds the directory
// through one view; through the other view and through the real path the
// kernel lock looks free, and the cross-check refuses Acquire, Takeover and
// ClearStale, naming the runner, which is left running and never signalled;
// Running and Status there say a runner runs.
func TestFuseViewsCrossCheck(t *testing.T) {
	real, a, b := bindfsViews(t, "bindfs")
	defer TrustFilesystem("fuse.bindfs")()
	cmd := testharness.Command(filepath.Join(a, "d"))
	cmd.Env = append(os.Environ(), fsinfo.TrustEnv+"=fuse.bindfs")
	runner := startChildCmd(t, cmd, "acquire")
	runner.Expect("acquired")
	pid := strconv.Itoa(runner.PID())
	lockBefore, err := os.ReadFile(filepath.Join(real, "d", LockName))
	require.NoError(t, err)
	require.Contains(t, string(lockBefore), `"pid":`+pid)

	for _, dir := range []string{filepath.Join(b, "d"), filepath.Join(real, "d")} {
		t.Run(filepath.Base(filepath.Dir(dir)), func(t *testing.T) {
			logged := captureLog(t)
			refused := func(what string, err error) {
				t.Helper()
				if assert.ErrorIs(t, err, ErrLockingUnsupported, what) {
					assert.Contains(t, err.Error(), "pid "+pid+" (verified alive)", what)
					assert.Contains(t, err.Error(), filepath.Join(a, "d", LockName), what)
					assert.Contains(t, err.Error(), "etcd module", what)
				}
			}
			_, err := Acquire(dir)
			refused("Acquire", err)
			ctx, cancel := context.WithTimeout(context.Background(), childWait)
			defer cancel()
			_, err = Takeover(ctx, dir, TakeoverOptions{Grace: 50 * time.Millisecond, KillAfter: 50 * time.Millisecond})
			refused("Takeover", err)
			_, _, err = ClearStale(dir)
			refused("ClearStale", err)
			assert.Contains(t, logged.String(), "does not exclude")

			sctx, scancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			res, err := Standby(sctx, dir, StandbyOptions{})
			scancel()
			assert.False(t, res.Resumed, "Standby never resumes beside the runner")
			assert.ErrorIs(t, err, context.DeadlineExceeded)

			rec, running, err := Running(dir)
			require.NoError(t, err)
			assert.True(t, running, "Running never says no runner")
			assert.Equal(t, runner.PID(), rec.PID)
			r, err := Status(dir)
			require.NoError(t, err)
			assert.True(t, r.Held, "Status never says no runner")
			assert.Equal(t, runner.PID(), r.Holder.PID)
			assert.Contains(t, strings.Join(r.Warnings, "\n"), "another mount")
			assert.NotEmpty(t, r.Filesystem)
		})
	}
	// The runner was left alone, and its lock file as it was.
	runner.Send("read")
	assert.Empty(t, runner.Expect("read"), "the runner reads its lock file")
	lockAfter, err := os.ReadFile(filepath.Join(real, "d", LockName))
	require.NoError(t, err)
	assert.Equal(t, string(lockBefore), string(lockAfter))
	rec, running, err := Running(filepath.Join(a, "d"))
	require.NoError(t, err)
	assert.True(t, running)
	assert.Equal(t, runner.PID(), rec.PID)
	r, err := Status(filepath.Join(a, "d"))
	require.NoError(t, err)
	assert.True(t, r.Held && r.Verified)
	assert.Empty(t, r.Restart, "no restart request was left for the runner")
	assert.Empty(t, r.Waiting, "the refused starters withdrew from the gate")
	assert.Equal(t, "fuse.bindfs", r.Filesystem)
	assert.NotContains(t, strings.Join(r.Warnings, "\n"), "another mount", "through its own mount the runner holds it plainly")
	runner.CloseStdin()
	require.NoError(t, runner.Wait())

	// Once the runner is gone, the real path admits.
	release, err := Acquire(filepath.Join(real, "d"))
	require.NoError(t, err)
	release()
}

// The cross-check never refuses on a local disk where nobody else holds
// the directory: an identity of a live process whose descriptor serves
// another file (a runner.lock of another directory on this filesystem, or
// something else), and one copied from a live runner's directory to another
// filesystem (cp -a while it ran), are no proof.
func TestCrossCheckNeverRefusesLocal(t *testing.T) {
	other := tempDir(t)
	runner := startChild(t, "acquire", other)
	runner.Expect("acquired")
	content, err := os.ReadFile(filepath.Join(other, LockName))
	require.NoError(t, err)
	require.NotEmpty(t, content)

	copies := []string{tempDir(t)} // the same filesystem
	if shm, err := os.MkdirTemp("/dev/shm", "rs-cross-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		copies = append(copies, shm) // most likely another filesystem
	}
	logged := captureLog(t)
	for _, dir := range copies {
		require.NoError(t, os.WriteFile(filepath.Join(dir, LockName), content, 0o600))
		release, err := Acquire(dir)
		require.NoError(t, err, "a copied identity in %s", dir)
		release()
	}
	// The identity names a live process's descriptor open on something else.
	dir := tempDir(t)
	lc := bytes.Replace(content, []byte(`"fd":`), []byte(`"fd":0,"x":`), 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, LockName), lc, 0o600))
	release, err := Acquire(dir)
	require.NoError(t, err)
	release()
	assert.NotContains(t, logged.String(), "does not exclude")
	runner.CloseStdin()
	require.NoError(t, runner.Wait())
}
