//go:build unix || windows

package runnerstate

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scopeBusy is what the "scope" role reports about a refused AcquireScope.
type scopeBusy struct {
	Owner    string `json:"owner"`
	PID      int    `json:"pid"`
	Verified bool   `json:"verified"`
	Msg      string `json:"msg"`
	Busy     bool   `json:"busy"`     // errors.Is(err, ErrBusy)
	Deadline bool   `json:"deadline"` // errors.Is(err, context.DeadlineExceeded)
	Millis   int64  `json:"ms"`       // how long the call took
}

// scopeArg is the "scope" role's argument.
func scopeArg(scopeDir, dataDir string) string { return scopeDir + "\n" + dataDir }

// expectBusy waits for a "busy" line from a "scope" child and decodes it.
func expectBusy(t *testing.T, c *child) scopeBusy {
	t.Helper()
	var b scopeBusy
	require.NoError(t, json.Unmarshal([]byte(c.Expect("busy ")), &b))
	return b
}

// cancelled is a context that has already ended: a call given it may make
// one try but never wait.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// Case: two processes AcquireScope one scope with different data dirs; the
// second is refused within its 200 ms and told the first one's data dir;
// once the first releases, the sidecar is gone and the second gets in.
func TestScopeSecondServerRefusedNamesFirstDataDir(t *testing.T) {
	base := tempDir(t)
	scopeDir := filepath.Join(base, "shared", "scope") // AcquireScope creates it
	dataA, dataB := filepath.Join(base, "data-a"), filepath.Join(base, "data-b")
	sidecar := filepath.Join(scopeDir, scopeOwnerName)

	a := startChild(t, "scope", scopeArg(scopeDir, dataA))
	a.Send("acquire 0")
	a.Expect("held")
	owner, ok := ReadScopeOwner(scopeDir)
	require.True(t, ok)
	assert.Equal(t, dataA, owner.DataDir)
	assert.Equal(t, a.PID(), owner.PID)
	assert.Equal(t, a.PID(), owner.Process.PID)
	assert.NotZero(t, owner.Process.StartTicks)

	b := startChild(t, "scope", scopeArg(scopeDir, dataB))
	b.Send("acquire 200")
	busy := expectBusy(t, b)
	assert.Equal(t, dataA, busy.Owner, "the refusal names the data dir the holder serves")
	assert.Contains(t, busy.Msg, dataA)
	assert.Contains(t, busy.Msg, filepath.Join(scopeDir, scopeLockName))
	assert.Equal(t, a.PID(), busy.PID)
	assert.True(t, busy.Verified, "the lock file (or, on Windows, the sidecar) carries the holder's identity")
	assert.True(t, busy.Busy, "errors.Is(err, ErrBusy)")
	assert.True(t, busy.Deadline, "errors.Is(err, context.DeadlineExceeded)")
	assert.GreaterOrEqual(t, busy.Millis, int64(200), "it waited for its whole deadline")

	a.Send("release")
	a.Expect("released")
	_, err := os.Lstat(sidecar)
	assert.True(t, os.IsNotExist(err), "release removes the sidecar: %v", err)
	_, ok = ReadScopeOwner(scopeDir)
	assert.False(t, ok)

	b.Send("acquire 200")
	b.Expect("held")
	owner, ok = ReadScopeOwner(scopeDir)
	require.True(t, ok)
	assert.Equal(t, dataB, owner.DataDir)
	assert.Equal(t, b.PID(), owner.PID)

	require.NoError(t, b.Stop())
	require.NoError(t, a.Stop())
	_, err = os.Lstat(sidecar)
	assert.True(t, os.IsNotExist(err), "the second server's release removed its sidecar too")
	content, err := os.ReadFile(filepath.Join(scopeDir, scopeLockName))
	require.NoError(t, err, "the lock file is never removed")
	assert.Empty(t, content, "release clears the holder's identity")
}

// A waiting AcquireScope waits in the kernel and is admitted the moment the
// holder releases.
func TestScopeWaiterAdmittedOnRelease(t *testing.T) {
	base := tempDir(t)
	scopeDir := filepath.Join(base, "scope")
	a := startChild(t, "scope", scopeArg(scopeDir, filepath.Join(base, "a")))
	a.Send("acquire 0")
	a.Expect("held")
	b := startChild(t, "scope", scopeArg(scopeDir, filepath.Join(base, "b")))
	b.Send("acquire 0")
	awaitBlocked(t, "the second server blocks in flock", filepath.Join(scopeDir, scopeLockName), 1)
	a.Send("release")
	a.Expect("released")
	b.Expect("held")
	owner, ok := ReadScopeOwner(scopeDir)
	require.True(t, ok)
	assert.Equal(t, filepath.Join(base, "b"), owner.DataDir)
	require.NoError(t, b.Stop())
	require.NoError(t, a.Stop())
}

// Case: a corrupt sidecar reads as no owner, and a refusal still names the
// scope path.
func TestScopeCorruptSidecar(t *testing.T) {
	base := tempDir(t)
	scopeDir := filepath.Join(base, "scope")
	sidecar := filepath.Join(scopeDir, scopeOwnerName)
	holder := startChild(t, "scope", scopeArg(scopeDir, filepath.Join(base, "data")))
	holder.Send("acquire 0")
	holder.Expect("held")
	_, ok := ReadScopeOwner(scopeDir)
	require.True(t, ok)

	log := captureLog(t)
	for _, content := range []string{"not json", "[]", `{"data_dir": 3}`, "", "{}", `{"data_dir": ""}`, `{"data_dir": "/x"} trailing`, `"/x"`} {
		t.Run(content, func(t *testing.T) {
			require.NoError(t, os.WriteFile(sidecar, []byte(content), 0o644))
			owner, ok := ReadScopeOwner(scopeDir)
			assert.False(t, ok)
			assert.Equal(t, ScopeOwner{}, owner)

			_, err := AcquireScope(cancelled(), scopeDir, filepath.Join(base, "other"))
			var be *BusyError
			require.ErrorAs(t, err, &be)
			assert.Empty(t, be.Owner)
			if lockFileReadable {
				assert.Equal(t, holder.PID(), be.PID, "named from the lock file")
			}
			assert.Contains(t, err.Error(), scopeDir, "the refusal names the scope")
			assert.ErrorIs(t, err, ErrBusy)
			assert.ErrorIs(t, err, context.Canceled)
		})
	}
	assert.Contains(t, log.String(), sidecar)
	assert.Equal(t, 1, strings.Count(log.String(), "scope owner record cannot be read"), "an unreadable sidecar is logged once")

	// A sidecar that is a symlink or a directory is not read either.
	require.NoError(t, os.Remove(sidecar))
	if symlinksWork() {
		good := filepath.Join(base, "good.json")
		require.NoError(t, os.WriteFile(good, []byte(`{"data_dir":"/elsewhere","pid":1}`), 0o644))
		require.NoError(t, os.Symlink(good, sidecar))
		_, ok = ReadScopeOwner(scopeDir)
		assert.False(t, ok, "a symlinked sidecar is never followed")
		require.NoError(t, os.Remove(sidecar))
	}
	require.NoError(t, os.Mkdir(sidecar, 0o755))
	_, ok = ReadScopeOwner(scopeDir)
	assert.False(t, ok)
	require.NoError(t, os.Remove(sidecar))

	_, ok = ReadScopeOwner(filepath.Join(base, "nowhere"))
	assert.False(t, ok, "an absent scope has no owner")
	require.NoError(t, holder.Stop())
}

// A sidecar whose holder is provably gone (its successor holds the lock but
// has not replaced it yet) never names the holder; one that cannot be proven
// gone does.
func TestScopeRefusalSkipsDeadHoldersSidecar(t *testing.T) {
	base := tempDir(t)
	scopeDir := filepath.Join(base, "scope")
	sidecar := filepath.Join(scopeDir, scopeOwnerName)
	holder := startChild(t, "scope", scopeArg(scopeDir, filepath.Join(base, "data")))
	holder.Send("acquire 0")
	holder.Expect("held")

	gone := Self()
	gone.StartTicks++ // this pid, another start: a process that no longer exists
	data, err := json.Marshal(ScopeOwner{DataDir: "/gone", PID: gone.PID, Process: gone})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(sidecar, data, 0o644))
	owner, ok := ReadScopeOwner(scopeDir)
	require.True(t, ok, "the file itself reads fine: it is only a hint")
	assert.Equal(t, "/gone", owner.DataDir)
	_, err = AcquireScope(cancelled(), scopeDir, filepath.Join(base, "other"))
	var be *BusyError
	require.ErrorAs(t, err, &be)
	assert.Empty(t, be.Owner)
	assert.NotContains(t, err.Error(), "/gone")

	require.NoError(t, os.WriteFile(sidecar, []byte(`{"data_dir":"/named"}`), 0o644))
	_, err = AcquireScope(cancelled(), scopeDir, filepath.Join(base, "other"))
	require.ErrorAs(t, err, &be)
	assert.Equal(t, "/named", be.Owner, "an owner that cannot be proven gone is named")
	require.NoError(t, holder.Stop())
}

// Case: the scope's holder is killed with SIGKILL: the next AcquireScope is
// admitted without waiting and replaces the stale sidecar.
func TestScopeHolderKilled(t *testing.T) {
	base := tempDir(t)
	scopeDir := filepath.Join(base, "scope")
	dataA, dataB := filepath.Join(base, "a"), filepath.Join(base, "b")
	a := startChild(t, "scope", scopeArg(scopeDir, dataA))
	a.Send("acquire 0")
	a.Expect("held")
	a.Kill()
	require.Error(t, a.Wait())
	owner, ok := ReadScopeOwner(scopeDir)
	require.True(t, ok, "a killed holder leaves its sidecar")
	require.Equal(t, a.PID(), owner.PID)

	log := captureLog(t)
	// A context that has already ended: admitted means admitted at once.
	release, err := AcquireScope(cancelled(), scopeDir, dataB)
	require.NoError(t, err)
	owner, ok = ReadScopeOwner(scopeDir)
	require.True(t, ok)
	assert.Equal(t, dataB, owner.DataDir)
	assert.Equal(t, os.Getpid(), owner.PID)
	assert.True(t, sameProcess(owner.Process, Self()))
	assert.Contains(t, log.String(), "replaced the scope owner record a previous holder left")
	assert.Contains(t, log.String(), "pid="+strconv.Itoa(a.PID()))

	if lockFileReadable {
		content, err := os.ReadFile(filepath.Join(scopeDir, scopeLockName))
		require.NoError(t, err)
		id, ok := parseLockContent(content)
		require.True(t, ok)
		assert.True(t, sameProcess(id, Self()), "the lock file names the new holder")
	}

	release()
	release() // idempotent
	_, ok = ReadScopeOwner(scopeDir)
	assert.False(t, ok)
	entries, err := os.ReadDir(scopeDir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{scopeLockName}, names, "no temporary file or sidecar is left")
}

// The sidecar is removed before the lock is freed: a process that gets the
// bare lock the instant it is released never finds it.
func TestScopeReleaseRemovesSidecarBeforeUnlock(t *testing.T) {
	scopeDir := filepath.Join(tempDir(t), "scope")
	release, err := AcquireScope(background(t), scopeDir, tempDir(t))
	require.NoError(t, err)
	raw := startChild(t, "scope-raw", scopeDir)
	raw.Expect("waiting")
	awaitBlocked(t, "the raw locker blocks in flock", filepath.Join(scopeDir, scopeLockName), 1)
	release()
	assert.Equal(t, "owner=false", raw.Expect("locked"))
	require.NoError(t, raw.Wait())
}

// In one process a scope excludes a second AcquireScope exactly as it does
// across processes, and the refusal names this process and its data dir.
func TestScopeInProcess(t *testing.T) {
	base := tempDir(t)
	scopeDir := filepath.Join(base, "scope")
	dataA := filepath.Join(base, "a")
	release, err := AcquireScope(background(t), scopeDir, dataA)
	require.NoError(t, err)
	_, err = AcquireScope(cancelled(), scopeDir, filepath.Join(base, "b"))
	var be *BusyError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, os.Getpid(), be.PID)
	assert.True(t, be.Verified)
	assert.Equal(t, dataA, be.Owner)
	assert.Equal(t, filepath.Join(scopeDir, scopeLockName), be.Path)
	assert.Equal(t, "runnerstate: "+be.Path+" is locked by this process (pid "+strconv.Itoa(os.Getpid())+
		") serving "+dataA+": context canceled", err.Error())
	release()
	release2, err := AcquireScope(cancelled(), scopeDir, filepath.Join(base, "b"))
	require.NoError(t, err)
	release2()
	assert.Equal(t, 0, filelock.Parked(), "no wait was parked")
}

// A relative data dir is recorded absolute: the refused server may run in
// another working directory.
func TestScopeRecordsAbsoluteDataDir(t *testing.T) {
	base := tempDir(t)
	t.Chdir(base)
	release, err := AcquireScope(background(t), "scope", "data")
	require.NoError(t, err)
	defer release()
	owner, ok := ReadScopeOwner(filepath.Join(base, "scope"))
	require.True(t, ok)
	assert.Equal(t, filepath.Join(base, "data"), owner.DataDir)
	_, err = os.Stat(filepath.Join(base, "data"))
	assert.True(t, os.IsNotExist(err), "the data dir is not created")
}

func TestScopeLockingUnsupported(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOLCK, syscall.EOPNOTSUPP} {
		t.Run(errno.Error(), func(t *testing.T) {
			scopeDir := filepath.Join(tempDir(t), "scope")
			restore := injectLockErrorOrSkip(t, errno)
			_, err := AcquireScope(background(t), scopeDir, tempDir(t))
			restore()
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrLockingUnsupported)
			assert.ErrorIs(t, err, errno)
			assert.NotErrorIs(t, err, ErrBusy)
			assert.Contains(t, err.Error(), scopeDir)
			assert.Contains(t, err.Error(), "move it to a local disk")
			_, ok := ReadScopeOwner(scopeDir)
			assert.False(t, ok, "no sidecar without the lock")
		})
	}
}

func TestScopeRefusesOddPaths(t *testing.T) {
	base := tempDir(t)
	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))

	_, err := AcquireScope(background(t), "", base)
	assert.ErrorContains(t, err, "scope dir is empty")
	_, err = AcquireScope(background(t), base, "")
	assert.ErrorContains(t, err, "data dir is empty")
	_, err = AcquireScope(background(t), file, base)
	assert.ErrorContains(t, err, file)
	assert.ErrorContains(t, err, "not a directory")

	for _, tc := range []struct {
		name, file, want string
		plant            func(path string) error
	}{
		{"lock is a symlink", scopeLockName, "symlink", func(p string) error { return os.Symlink(file, p) }},
		{"lock is a directory", scopeLockName, "directory", func(p string) error { return os.Mkdir(p, 0o755) }},
		{"sidecar is a symlink", scopeOwnerName, "symlink", func(p string) error { return os.Symlink(file, p) }},
		{"sidecar is a directory", scopeOwnerName, "directory", func(p string) error { return os.Mkdir(p, 0o755) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == "symlink" {
				needSymlinks(t)
			}
			scopeDir := tempDir(t)
			path := filepath.Join(scopeDir, tc.file)
			require.NoError(t, tc.plant(path))
			_, err := AcquireScope(background(t), scopeDir, base)
			require.Error(t, err)
			assert.NotErrorIs(t, err, ErrBusy)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tc.want)
			if tc.file == scopeOwnerName {
				// Refused after the lock was taken: it was let go again.
				unlock, err := TryLock(filepath.Join(scopeDir, scopeLockName))
				require.NoError(t, err, "the scope lock was released")
				unlock()
			}
		})
	}
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Empty(t, data, "nothing was written through a symlink")
}

func TestParseScopeOwner(t *testing.T) {
	id := Self()
	good, err := json.Marshal(ScopeOwner{DataDir: "/d", PID: id.PID, Process: id})
	require.NoError(t, err)
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{string(good), true},
		{" \n" + string(good) + "\n", true},
		{`{"data_dir":"/d"}`, true},
		{`{"data_dir":"/d","extra":[1,2]}`, true},
		{"", false},
		{"   ", false},
		{"not json", false},
		{"[]", false},
		{"null", false},
		{`{"data_dir": 3}`, false},
		{`{"data_dir": null}`, false},
		{`{"pid": 3}`, false},
		{`{"data_dir":"/d"`, false},
	} {
		owner, err := parseScopeOwner([]byte(tc.in))
		if tc.want {
			assert.NoError(t, err, "%q", tc.in)
			assert.Equal(t, "/d", owner.DataDir)
		} else {
			assert.Error(t, err, "%q", tc.in)
		}
	}
	// The JSON field names are the contract.
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(good, &fields))
	for _, k := range []string{"data_dir", "pid", "process"} {
		assert.Contains(t, fields, k)
	}
	assert.True(t, bytes.Contains(fields["process"], []byte(`"start_ticks"`)))
}

// Case: a scope.owner.json that names another pid than the holder's (a
// forged one, or a bare pid that is not the holder) is not the holder's
// data dir, and a refusal does not name it, where the holder is known (on
// Windows only the sidecar can name it).
func TestScopeRefusalIgnoresAnotherPidsSidecar(t *testing.T) {
	base := tempDir(t)
	scopeDir := filepath.Join(base, "scope")
	release, err := AcquireScope(background(t), scopeDir, filepath.Join(base, "a"))
	require.NoError(t, err)
	defer release()
	for _, forged := range []string{`{"data_dir":"/forged","pid":999999}`, `{"data_dir":"/forged","pid":1}`} {
		require.NoError(t, os.WriteFile(filepath.Join(scopeDir, scopeOwnerName), []byte(forged+"\n"), 0o644))
		_, err = AcquireScope(cancelled(), scopeDir, filepath.Join(base, "b"))
		var be *BusyError
		require.ErrorAs(t, err, &be)
		if be.PID != os.Getpid() {
			continue // the holder is not known (Windows): the sidecar stays a hint
		}
		assert.Empty(t, be.Owner, "a sidecar naming pid %s is not the holder's: %v", forged, err)
		assert.NotContains(t, err.Error(), "/forged")
	}
}

func init() { registerRole("scope-raw", roleScopeRaw) }

// scope-raw: wait for the scope's bare lock file with Lock, as a process
// that does not go through AcquireScope, and say whether a scope owner
// record was there at the moment the lock became ours.
func roleScopeRaw(scopeDir string) int {
	say("waiting")
	unlock, err := Lock(context.Background(), filepath.Join(scopeDir, scopeLockName))
	if err != nil {
		say("error %v", err)
		return 1
	}
	_, ok := ReadScopeOwner(scopeDir)
	say("locked owner=%t", ok)
	unlock()
	return 0
}
