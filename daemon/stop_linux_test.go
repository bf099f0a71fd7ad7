package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const envFlockReplace = "RS_DAEMON_FLOCK_REPLACE" // "1": the flock role first puts a file of its own at the path

func init() { roles["flock"] = roleFlock }

// flock: take an exclusive flock on the path (its argument), through a
// read-only descriptor (read access is all flock needs), say "locked" and
// hold it until stdin closes. With $RS_DAEMON_FLOCK_REPLACE=1 it first
// renames a file of its own over the path, as a user who may write the
// directory can.
func roleFlock(path string) int {
	if os.Getenv(envFlockReplace) == "1" {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, nil, 0o644); err != nil {
			testharness.Say("error %v", err)
			return 1
		}
		if err := os.Rename(tmp, path); err != nil {
			testharness.Say("error %v", err)
			return 1
		}
	}
	f, err := os.Open(path)
	if err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	testharness.Say("locked")
	for range testharness.Commands() {
	}
	return 0
}

// stopWhileStateLockHeld runs Stop on dir with a 1 s context while another
// process holds dir/.state.lock, and checks that it returned once the
// context had ended (well before the state lock's own 30 s bound), with a
// busy error naming .state.lock, and none blaming a stuck writer. It
// returns the error.
func stopWhileStateLockHeld(t *testing.T, dir string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	began := time.Now()
	err := Stop(ctx, dir, runnerstate.RestartNow)
	took := time.Since(began)
	t.Logf("Stop took %v: %v", took, err)
	require.Error(t, err)
	assert.Error(t, ctx.Err(), "Stop returned once its context had ended, not before")
	assert.Less(t, took, 10*time.Second, "bounded by the context, not by the state lock's 30 s")
	assert.ErrorIs(t, err, runnerstate.ErrBusy)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), filepath.Join(dir, ".state.lock"), "names the file waited on")
	assert.NotContains(t, err.Error(), "stuck")
	return err
}

// daemon.Stop is bounded by its context whatever holds the state lock: a
// process of the same user holding .state.lock made Stop with a 1 s
// context wait the state lock's 30 s, then blame a "stuck" writer. Now it
// returns at the context's end naming .state.lock and its holder.
func TestStopIsBoundedWhileTheStateLockIsHeld(t *testing.T) {
	dir := shortDir(t)
	srv := startServer(t, dir, Options{Endpoints: unixEndpoint(filepath.Join(dir, "s.sock"))})
	srv.Expect("ready")
	holder := testharness.StartCmd(t, testharness.Command(filepath.Join(dir, ".state.lock")), "flock")
	holder.Expect("locked")
	err := stopWhileStateLockHeld(t, dir)
	assert.Contains(t, err.Error(), "pid ", "names the holder")
	require.NoError(t, holder.Stop())
	require.NoError(t, Stop(background(t), dir, runnerstate.RestartNow), "once the state lock is free")
	srv.Expect("leaving")
}

// The same as another user: in a directory shared on purpose (opted in,
// mode 0777, so owners are not checked there), mallory puts her own
// .state.lock in place and holds it; alice's Stop with a 1 s context
// returns at its end, saying the holder is another user.
func TestStopIsBoundedWhileAnotherUserHoldsTheStateLock(t *testing.T) {
	u := otherUsers(t)
	dir := u.dir("shared", 0)
	require.NoError(t, os.Chmod(dir, 0o777))
	defer runnerstate.TrustDir(dir)()
	cmd := testharness.Command(dir)
	srv := startServerCmd(t, cmd, dir, Options{Endpoints: unixEndpoint(filepath.Join(dir, "s.sock"))})
	srv.Expect("ready")
	hcmd := u.as(testharness.Command(filepath.Join(dir, ".state.lock")), mallory)
	hcmd.Env = append(os.Environ(), envFlockReplace+"=1")
	holder := testharness.StartCmd(t, hcmd, "flock")
	holder.Expect("locked")
	err := stopWhileStateLockHeld(t, dir)
	assert.Contains(t, err.Error(), "held by uid 4242", "the holder is another user")
	assert.Contains(t, err.Error(), "not you")
	require.NoError(t, holder.Stop())
	require.NoError(t, Stop(background(t), dir, runnerstate.RestartNow), "once the state lock is free")
	srv.Expect("leaving")
}

// startServerCmd is startServer for a directory opted in by
// RUNNERSTATE_TRUST_DIRS in the server's environment.
func startServerCmd(t *testing.T, cmd *exec.Cmd, dir string, opts Options) *testharness.Child {
	t.Helper()
	base := serverCmd(dir, opts)
	cmd.Env = append(base.Env, "RUNNERSTATE_TRUST_DIRS="+dir)
	return testharness.StartCmd(t, cmd, "server")
}
