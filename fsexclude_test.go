//go:build unix || windows

package runnerstate

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeFilesystem makes the filesystem of root, and of every directory below
// it, judged as typ by the statfs hook, whose locks do not exclude (unless
// typ is trusted), until the test ends: the filesystems no server here can
// give (NFS, CIFS, 9p), and the macOS and Windows cases.
func fakeFilesystem(t *testing.T, root, typ string) {
	t.Helper()
	t.Cleanup(fsinfo.SetHook(func(dir string) (fsinfo.Answer, bool) {
		if dir == root || strings.HasPrefix(dir, root+string(filepath.Separator)) {
			return fsinfo.Answer{Type: typ}, true
		}
		return fsinfo.Answer{}, false
	}))
}

// assertRefusedEverywhere checks that every lock the package takes in dir
// (on a filesystem of type typ whose locks do not exclude) is refused with
// ErrLockingUnsupported naming the path, the type and what to do; that the
// probes never say "no runner"; and that nothing was created in dir or left
// held.
func assertRefusedEverywhere(t *testing.T, dir, typ string) {
	t.Helper()
	ctx := background(t)
	refused := func(what string, err error) {
		t.Helper()
		if assert.ErrorIs(t, err, ErrLockingUnsupported, what) {
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, "runnerstate: "), "%s: %s", what, msg)
			assert.Contains(t, msg, dir, what)
			assert.Contains(t, msg, typ, what)
			assert.Contains(t, msg, "local disk", what)
			assert.Contains(t, msg, "etcd module", what)
			assert.Contains(t, msg, "RUNNERSTATE_TRUST_FS="+typ, what)
		}
	}
	_, err := TryLock(filepath.Join(dir, "x.lock"))
	refused("TryLock", err)
	_, err = Lock(ctx, filepath.Join(dir, "x.lock"))
	refused("Lock", err)
	_, err = TryRLock(filepath.Join(dir, "x.lock"))
	refused("TryRLock", err)
	_, err = RLock(ctx, filepath.Join(dir, "x.lock"))
	refused("RLock", err)
	_, err = Acquire(dir)
	refused("Acquire", err)
	_, err = Takeover(ctx, dir, TakeoverOptions{})
	refused("Takeover", err)
	_, _, err = ClearStale(dir)
	refused("ClearStale", err)
	_, err = AcquireScope(ctx, filepath.Join(dir, "scope"), dir)
	refused("AcquireScope", err)
	_, err = NoSyncRunning(dir)
	refused("NoSyncRunning", err)
	assert.ErrorIs(t, err, ErrSyncUnknown, "NoSyncRunning")
	refused("RequestRestart", RequestRestart(dir, RestartDrain))
	refused("AppendLine", AppendLine(dir, "jobs.log", "one"))
	refused("SaveLines", SaveLines(dir, "jobs.log", []string{"one"}))
	refused("MigrateFile", MigrateFile(dir, "old.log", "jobs.log"))
	_, err = Standby(ctx, dir, StandbyOptions{})
	refused("Standby", err)
	_, err = Start(ctx, dir, testharness.Command(dir), StartOptions{})
	refused("Start", err)

	logged := captureLog(t)
	release, err := SyncRunning(ctx, dir)
	require.NoError(t, err, "SyncRunning runs unmarked")
	release()
	assert.Equal(t, 1, strings.Count(logged.String(), "level=WARN"), "SyncRunning warns once: %s", logged)
	assert.Contains(t, logged.String(), typ)

	_, _, err = Running(dir)
	refused("Running", err)
	r, err := Status(dir)
	require.NoError(t, err, "Status reports")
	assert.False(t, r.Held)
	assert.Equal(t, typ, r.Filesystem)
	assert.NotEmpty(t, r.Verdict)
	if assert.NotEmpty(t, r.Warnings) {
		assert.Contains(t, r.Warnings[0], typ)
		assert.Contains(t, r.Warnings[0], "cannot tell")
	}

	// Nothing was created in dir: the filesystem was judged first.
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		assert.True(t, d.IsDir(), "%s was created on a filesystem whose locks do not exclude", path)
		return nil
	}))
}

// On the filesystems no server here can give, every lock is refused by
// default, each named as mountinfo (or macOS, or Windows) names it; a
// trusted type is admitted.
func TestNotExcludingFilesystemsRefused(t *testing.T) {
	for _, typ := range []string{"nfs4", "nfs", "cifs", "smb3", "9p", "fuse.sshfs", "virtiofs", "smbfs", "afpfs", "macfuse", "unc", "remote"} {
		t.Run(typ, func(t *testing.T) {
			dir := filepath.Join(tempDir(t), "d")
			require.NoError(t, os.Mkdir(dir, 0o755))
			fakeFilesystem(t, dir, typ)
			assertRefusedEverywhere(t, dir, typ)

			defer TrustFilesystem(typ)()
			release, err := Acquire(dir)
			require.NoError(t, err, "a trusted type is admitted")
			release()
			unlock, err := TryLock(filepath.Join(dir, "x.lock"))
			require.NoError(t, err)
			unlock()
			r, err := Status(dir)
			require.NoError(t, err)
			assert.Equal(t, typ, r.Filesystem)
		})
	}
}

// TrustFilesystem adds to the list and restores it; a type not listed is
// still refused.
func TestTrustFilesystemRestores(t *testing.T) {
	dir := filepath.Join(tempDir(t), "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	fakeFilesystem(t, dir, "nfs4")
	restore := TrustFilesystem("cifs", "nfs4")
	release, err := Acquire(dir)
	require.NoError(t, err)
	release()
	restore()
	_, err = Acquire(dir)
	assert.ErrorIs(t, err, ErrLockingUnsupported)
	defer TrustFilesystem("fuse.sshfs")()
	_, err = Acquire(dir)
	assert.ErrorIs(t, err, ErrLockingUnsupported, "another type's trust does not count")
}

// RUNNERSTATE_TRUST_FS opts types in, read when the first filesystem is
// judged: in a child, whose environment has it.
func TestTrustFilesystemFromEnvironment(t *testing.T) {
	dir := filepath.Join(tempDir(t), "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	for env, want := range map[string]string{
		"nfs4":                  "acquired",
		" fuse.gocryptfs,nfs4 ": "acquired",
		"nfs":                   "refused",
		"":                      "refused",
	} {
		cmd := testharness.Command(dir)
		cmd.Env = append(os.Environ(), fsinfo.TrustEnv+"="+env)
		c := startChildCmd(t, cmd, "acquire-on-nfs4")
		assert.Equal(t, want, c.Expect(""), "RUNNERSTATE_TRUST_FS=%q", env)
		c.CloseStdin()
		require.NoError(t, c.Wait())
	}
}

func init() {
	roles["acquire-on-nfs4"] = roleAcquireOnNFS
}

// acquire-on-nfs4: with dir judged nfs4, Acquire it and say "acquired" or
// "refused"; exit when stdin closes.
func roleAcquireOnNFS(dir string) int {
	fsinfo.SetHook(func(d string) (fsinfo.Answer, bool) {
		return fsinfo.Answer{Type: "nfs4"}, d == dir
	})
	release, err := Acquire(dir)
	if err != nil {
		say("refused")
	} else {
		say("acquired")
		defer release()
	}
	for range commands() {
	}
	return 0
}

// A filesystem that refuses locks outright (ENOLCK, as NFS without a lock
// manager answers) is named too when its type is one whose locks do not
// exclude; trusted, the system's answer stands.
func TestRefusedLocksNameTheFilesystem(t *testing.T) {
	dir := tempDir(t)
	path := filepath.Join(dir, "x.lock")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	fakeFilesystem(t, dir, "nfs4")
	defer injectLockErrorOrSkip(t, syscall.ENOLCK)()
	_, err := TryLock(path)
	require.ErrorIs(t, err, ErrLockingUnsupported)
	assert.Contains(t, err.Error(), "nfs4")
	defer TrustFilesystem("nfs4")()
	_, err = TryLock(path)
	require.ErrorIs(t, err, ErrLockingUnsupported)
	assert.ErrorIs(t, err, syscall.ENOLCK)
}
