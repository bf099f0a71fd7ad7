package runnerstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two local users, played for real: the tests run as root and start the
// test binary as alice and as mallory (uids no account needs), so that the
// kernel's owners and modes are theirs.
const (
	alice   = 4201
	mallory = 4202
)

// envAsOps lists the operations of the "as-user" role, ";"-separated.
const envAsOps = "RUNNERSTATE_TEST_AS_OPS"

// asUser prepares the test binary to run as uid (its gid the same number)
// in the role "as-user" on dir, running ops: a copy of the binary every user
// may execute.
func asUser(t *testing.T, uid int, dir string, ops ...string) *exec.Cmd {
	t.Helper()
	bin, attr := testharness.AsUser(t, uid)
	cmd := exec.Command(bin, "-test.run=^$", dir)
	cmd.SysProcAttr = attr
	cmd.Env = append(os.Environ(), envAsOps+"="+strings.Join(ops, ";"))
	return cmd
}

// asResult is one operation's outcome as the "as-user" role reports it.
type asResult struct {
	Op        string   `json:"op"`
	Err       string   `json:"err,omitempty"`
	Untrusted bool     `json:"untrusted,omitempty"`
	Perm      bool     `json:"perm,omitempty"`
	Held      bool     `json:"held,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

// runAs runs ops as uid on dir and returns their results by op.
func runAs(t *testing.T, uid int, dir string, ops ...string) map[string]asResult {
	t.Helper()
	c := startChildCmd(t, asUser(t, uid, dir, ops...), "as-user")
	got := map[string]asResult{}
	for range ops {
		var r asResult
		require.NoError(t, json.Unmarshal([]byte(c.Expect("op ")), &r))
		got[r.Op] = r
	}
	require.NoError(t, c.Wait())
	return got
}

func init() { registerRole("as-user", roleAsUser) }

// as-user: run the operations RUNNERSTATE_TEST_AS_OPS lists on dir, one
// after another, and say "op <json asResult>" for each: the library's
// calls (acquire, takeover, request, save, clearstale, running, status),
// and an attacker's moves: "mkdir" (dir, 0755), "plant:<name>:<content>"
// (dir/name, 0644), "plantlock:<name>" (an empty dir/name, 0600),
// "rlock:<name>" (a shared flock on dir/name, let go at once).
func roleAsUser(dir string) int {
	for _, op := range strings.Split(os.Getenv(envAsOps), ";") {
		r := asResult{Op: op}
		verb, arg, _ := strings.Cut(op, ":")
		var err error
		switch verb {
		case "mkdir":
			if err = os.Mkdir(dir, 0o755); err == nil {
				err = os.Chmod(dir, 0o755)
			}
		case "plant":
			name, content, _ := strings.Cut(arg, ":")
			err = os.WriteFile(filepath.Join(dir, name), []byte(content+"\n"), 0o644)
		case "plantlock":
			err = os.WriteFile(filepath.Join(dir, arg), nil, 0o600)
		case "rlock":
			var unlock func()
			if unlock, err = TryRLock(filepath.Join(dir, arg)); err == nil {
				unlock()
			}
		case "acquire":
			var release func()
			if release, err = Acquire(dir); err == nil {
				release()
			}
		case "takeover":
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var release func()
			if release, err = Takeover(ctx, dir, TakeoverOptions{}); err == nil {
				release()
			}
			cancel()
		case "request":
			err = RequestRestart(dir, RestartNow)
		case "save":
			err = SaveLines(dir, "state", []string{"x"})
		case "clearstale":
			_, _, err = ClearStale(dir)
		case "running":
			_, r.Held, err = Running(dir)
		case "status":
			var st Report
			st, err = Status(dir)
			r.Held, r.Warnings = st.Held, st.Warnings
		default:
			say("error unknown op %q", op)
			return 2
		}
		if err != nil {
			r.Err = err.Error()
			r.Untrusted = errors.Is(err, ErrUntrustedDir)
			r.Perm = errors.Is(err, os.ErrPermission)
		}
		data, _ := json.Marshal(r)
		say("op %s", data)
	}
	return 0
}

// writers are the calls of point 1 the role plays.
var writers = []string{"acquire", "takeover", "request", "save", "clearstale"}

// assertRefused checks that every writer was refused with ErrUntrustedDir,
// in a text naming the path, the owner and the mode.
func assertRefused(t *testing.T, got map[string]asResult, words ...string) {
	t.Helper()
	for _, op := range writers {
		r := got[op]
		assert.True(t, r.Untrusted, "%s: ErrUntrustedDir: %s", op, r.Err)
		for _, w := range words {
			assert.Contains(t, r.Err, w, "%s", op)
		}
		assert.Contains(t, r.Err, "RUNNERSTATE_TRUST_DIRS", "%s says what to do", op)
	}
}

// Point 1, played by mallory against alice: a directory mallory made
// (mkdir before alice's first run), a shared sticky directory (/tmp's kind)
// and a directory alice owns but mallory's group may write. Every call
// that writes refuses each, creating nothing, with ErrUntrustedDir naming
// the path, its owner and its mode; reads stay open to a directory only its
// owner can write (mallory's), and Running refuses one others can write.
func TestTrustAnotherUsersDirectoryIsRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to play two other users")
	}
	base := publicDir(t)
	require.NoError(t, os.Chmod(base, os.ModeSticky|0o777)) // as /tmp is
	all := append(append([]string{}, writers...), "running", "status")

	t.Run("made by mallory", func(t *testing.T) {
		dir := filepath.Join(base, "made")
		runAs(t, mallory, dir, "mkdir")
		got := runAs(t, alice, dir, all...)
		assertRefused(t, got, dir, "uid "+strconv.Itoa(mallory), "0755", "not by you (uid "+strconv.Itoa(alice)+") or root")
		assert.Empty(t, got["running"].Err, "reading stays open")
		assert.Empty(t, got["status"].Err)
		assert.Empty(t, dirSnapshot(t, dir), "nothing created")
	})
	t.Run("sticky and shared", func(t *testing.T) {
		dir := filepath.Join(base, "sticky")
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.Chmod(dir, os.ModeSticky|0o777))
		runAs(t, mallory, dir, `plant:restart.json:{"mode":"now"}`)
		got := runAs(t, alice, dir, all...)
		assertRefused(t, got, dir, "uid 0 (root)", "1777", "other users can write it")
		assert.True(t, got["running"].Untrusted, "Running refuses a directory others can write: %s", got["running"].Err)
		assert.Empty(t, got["status"].Err)
		assert.True(t, containsAny(got["status"].Warnings, "other users can write it"), "%q", got["status"].Warnings)
		assert.Equal(t, []string{RestartName}, names(t, dir), "nothing created")
	})
	t.Run("group-writable", func(t *testing.T) {
		dir := filepath.Join(base, "group")
		require.NoError(t, os.Mkdir(dir, 0o775))
		require.NoError(t, os.Chown(dir, alice, mallory))
		require.NoError(t, os.Chmod(dir, 0o775))
		runAs(t, mallory, dir, "plantlock:"+stateLockName)
		got := runAs(t, alice, dir, all...)
		assertRefused(t, got, dir, "uid "+strconv.Itoa(alice), "0775", "other users can write it")
		assert.True(t, got["running"].Untrusted, "%s", got["running"].Err)
	})
	t.Run("planted while it was shared", func(t *testing.T) {
		dir := filepath.Join(base, "planted")
		require.NoError(t, os.Mkdir(dir, 0o777))
		require.NoError(t, os.Chown(dir, alice, alice))
		require.NoError(t, os.Chmod(dir, 0o777))
		runAs(t, mallory, dir, "plantlock:"+stateLockName, `plant:restart.json:{"mode":"now"}`, `plant:gate.json:{"seq":1}`)
		require.NoError(t, os.Chmod(dir, 0o755)) // alice closes it: mallory's files stay
		got := runAs(t, alice, dir, all...)
		assertRefused(t, got, filepath.Join(dir, stateLockName), "uid "+strconv.Itoa(mallory), "0600", "not by the directory's owner (uid "+strconv.Itoa(alice)+")", "remove it")
		for _, op := range writers {
			assert.False(t, got[op].Perm, "%s names the stranger, not \"permission denied\": %s", op, got[op].Err)
		}
		for _, name := range []string{stateLockName, RestartName, gateName} {
			assert.True(t, containsAny(got["status"].Warnings, filepath.Join(dir, name)), "Status names %s: %q", name, got["status"].Warnings)
		}
	})
	t.Run("opted in", func(t *testing.T) {
		dir := filepath.Join(base, "team")
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.Chmod(dir, os.ModeSticky|0o777))
		cmd := asUser(t, alice, dir, "acquire", "running")
		cmd.Env = append(cmd.Env, "RUNNERSTATE_TRUST_DIRS="+dir)
		c := startChildCmd(t, cmd, "as-user")
		for range 2 {
			var r asResult
			require.NoError(t, json.Unmarshal([]byte(c.Expect("op ")), &r))
			assert.Empty(t, r.Err, "%s in a directory shared on purpose", r.Op)
		}
		require.NoError(t, c.Wait())
	})
	t.Run("alice's own", func(t *testing.T) {
		dir := filepath.Join(base, "own")
		got := runAs(t, alice, dir, all...)
		for _, op := range all {
			assert.Empty(t, got[op].Err, op)
		}
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "created 0700")
	})
}

// names lists dir's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// Point 2: the state lock is 0600, so another user's flock on it (read
// access was enough while it was 0644) can never stall a writer, and
// daemon.Stop with it; the state files stay readable by everyone.
func TestTrustStateLockIsNotAnotherUsersToHold(t *testing.T) {
	base := publicDir(t)
	dir := filepath.Join(base, "run")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, Publish(dir, Record{}))
	got := runAs(t, mallory, dir, "rlock:"+stateLockName, "running", "status")
	assert.True(t, got["rlock:"+stateLockName].Perm, "%s", got["rlock:"+stateLockName].Err)
	assert.Empty(t, got["running"].Err)
	assert.True(t, got["running"].Held, "runner.json is readable by every user")
	assert.Empty(t, got["status"].Err)
}

// Point 1: root managing a user's directory (an operator's sudo) is not
// refused, and the files it creates there are given to the directory's
// owner, so that the user's own runner can still take it afterwards.
func TestTrustRootManagesAUsersDirectory(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	dir := filepath.Join(publicDir(t), "alice")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chown(dir, alice, alice))
	release, err := Takeover(background(t), dir, TakeoverOptions{})
	require.NoError(t, err, "root accepts another user's directory")
	require.NoError(t, Publish(dir, Record{}))
	require.NoError(t, RequestRestart(dir, RestartDrain))
	for _, name := range []string{LockName, treeLockName, stateLockName, gateName, RecordName, RestartName} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err, name)
		assert.Equal(t, uint32(alice), fi.Sys().(*syscall.Stat_t).Uid, "%s is given to the directory's owner", name)
	}
	release()
	got := runAs(t, alice, dir, "acquire", "status")
	assert.Empty(t, got["acquire"].Err, "alice's runner takes it after root's")
	assert.Empty(t, got["status"].Warnings)
}

// Point 7: a lock held by another user's process is refused naming the
// file waited on and that user, as such.
func TestTrustBusyNamesAnotherUser(t *testing.T) {
	base := publicDir(t)
	require.NoError(t, os.Chmod(base, os.ModeSticky|0o777))
	path := filepath.Join(base, "shared.lock")
	holder := startChildCmd(t, asNobody(t, path), "hold")
	holder.Expect("locked")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Lock(ctx, path)
	require.ErrorIs(t, err, ErrBusy)
	assert.Contains(t, err.Error(), path, "the file waited on")
	assert.Contains(t, err.Error(), "held by uid 65534", "the other user")
	assert.Contains(t, err.Error(), "not you")
	require.NoError(t, holder.Stop())
}

// Point 4: a runner.json mallory planted while the directory was shared
// (opted in), forging the verified holder's record with her own endpoint,
// the directory made private again since: what it says is no evidence.
// Running ignores it (read through its descriptor, whose owner is hers),
// Status warns naming the file and its owner, and Publish refuses.
func TestTrustPlantedRecordIsIgnored(t *testing.T) {
	dir := filepath.Join(publicDir(t), "run")
	require.NoError(t, os.Mkdir(dir, 0o777))
	require.NoError(t, os.Chmod(dir, 0o777))
	restore := TrustDir(dir)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, Publish(dir, Record{Endpoints: []Endpoint{{Network: "unix", Address: "/run/alice.sock"}}}))
	path := filepath.Join(dir, RecordName)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	forged := strings.Replace(strings.TrimSpace(string(data)), "/run/alice.sock", "/run/mallory.sock", 1)
	require.NoError(t, os.Remove(path))
	plant := "plant:" + RecordName + ":" + forged
	got := runAs(t, mallory, dir, plant)
	require.Empty(t, got[plant].Err)
	restore()
	require.NoError(t, os.Chmod(dir, 0o755))

	rec, held, err := Running(dir)
	require.NoError(t, err)
	assert.True(t, held, "the holder's lock says so")
	assert.NotContains(t, fmt.Sprint(rec.Endpoints), "mallory", "the forged record is ignored")
	st, err := Status(dir)
	require.NoError(t, err)
	assert.NotContains(t, fmt.Sprint(st.Holder.Endpoints), "mallory")
	assert.True(t, anyContains(st.Warnings, path, "uid 4202"), "Status names the file and its owner: %q", st.Warnings)
	err = Publish(dir, Record{})
	require.ErrorIs(t, err, ErrUntrustedDir)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "uid 4202")
}

// Point 4, the writers' second line: the state lock is judged on the
// descriptor it is held through. A .state.lock mallory made while the
// directory was shared (the directory private again since) is refused by
// withStateLock itself, naming the file and its owner, and what it guards
// does not run, whatever the check of the directory before it found.
func TestTrustStateLockIsJudgedOnItsDescriptor(t *testing.T) {
	dir := filepath.Join(publicDir(t), "run")
	require.NoError(t, os.Mkdir(dir, 0o777))
	require.NoError(t, os.Chmod(dir, 0o777))
	plant := "plantlock:" + stateLockName
	got := runAs(t, mallory, dir, plant)
	require.Empty(t, got[plant].Err)
	require.NoError(t, os.Chmod(dir, 0o755))
	ran := false
	err := withStateLock(dir, func(stateHeld) error { ran = true; return nil })
	require.ErrorIs(t, err, ErrUntrustedDir)
	assert.Contains(t, err.Error(), filepath.Join(dir, stateLockName))
	assert.Contains(t, err.Error(), "uid 4202")
	assert.False(t, ran, "nothing is written under another user's lock")
	defer TrustDir(dir)()
	require.NoError(t, withStateLock(dir, func(stateHeld) error { return nil }), "opted in: owners are not checked")
}
