package runnerstate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func init() {
	registerRole("runner-lock-only", roleRunnerLockOnly)
}

// runner-lock-only: a runner of a build before v0.2, which knows no
// tree.lock: flock runner.lock (raw, exclusive), write its identity line
// there, say "locked", hold until stdin closes.
func roleRunnerLockOnly(dir string) int {
	f, err := os.OpenFile(filepath.Join(dir, LockName), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		say("error %v", err)
		return 1
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		say("error %v", err)
		return 1
	}
	line, _ := jsonLine(Self())
	f.Truncate(0)
	f.WriteAt(line, 0)
	say("locked")
	for range commands() {
	}
	return 0
}

// TestProtocolNumberWritten: every JSON file the package writes in a
// runner directory, and a scope's owner file, begins with "protocol": 1.
func TestProtocolNumberWritten(t *testing.T) {
	ctx := background(t)
	root := tempDir(t)
	dir, scope := filepath.Join(root, "runner"), filepath.Join(root, "scope")
	rec, err := Start(ctx, dir, startedRunner(dir, "ready"), StartOptions{})
	require.NoError(t, err)
	stopStarted(t, dir)
	require.True(t, rec.Ready)
	require.NoError(t, RequestRestart(dir, RestartDrain))
	eventually(t, "the started runner is gone", func() bool { _, held, _ := Running(dir); return !held })
	release, err := Takeover(ctx, dir, TakeoverOptions{})
	require.NoError(t, err)
	defer release()
	require.NoError(t, Publish(dir, Record{Specs: []string{"protocol"}}))
	require.NoError(t, RequestRestart(dir, RestartDrain))
	releaseScope, err := AcquireScope(ctx, scope, filepath.Join(root, "data"))
	require.NoError(t, err)
	defer releaseScope()

	for _, path := range []string{
		filepath.Join(dir, LockName), filepath.Join(dir, treeLockName), filepath.Join(dir, RecordName),
		filepath.Join(dir, RestartName), filepath.Join(dir, gateName), filepath.Join(dir, startName),
		filepath.Join(scope, scopeOwnerName),
	} {
		data, err := os.ReadFile(path)
		require.NoError(t, err, path)
		assert.True(t, strings.HasPrefix(string(data), `{"protocol":1,`), "%s begins with the protocol number: %s", path, data)
		assert.Equal(t, 1, protocolOf(data), path)
	}
	got, ok, err := Running(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []string{"protocol"}, got.Specs, "the number is read past")
}

// TestOlderGateReadsAsProtocolOne: a gate.json as v0.2 and v0.3 write it
// (no number) is the gate: its sequence goes on, and the next writer
// writes it back with the number.
func TestOlderGateReadsAsProtocolOne(t *testing.T) {
	dir := tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, gateName), []byte(`{"seq":41,"admitted":40,"waiting":[]}`+"\n"), 0o644))
	release, err := Takeover(background(t), dir, TakeoverOptions{})
	require.NoError(t, err)
	defer release()
	data, err := os.ReadFile(filepath.Join(dir, gateName))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), `{"protocol":1,"seq":42,"admitted":42,`), "%s", data)
}

// newerFile is a file of a runner directory as a build of protocol 2 might
// write it.
func newerFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	content := map[string]string{
		LockName:     `{"protocol":2,"instance":"0123","pid":1}`,
		treeLockName: `{"protocol":2,"instance":"0123","pid":1}`,
		RecordName:   `{"protocol":2,"pid":1,"ready":true}`,
		RestartName:  `{"protocol":2,"mode":"now","for":""}`,
		gateName:     `{"protocol":2,"seq":1,"admitted":1,"waiting":[]}`,
		startName:    `{"protocol":2,"seq":1}`,
		LingerName:   `{"protocol":2,"holder":{"pid":1}}`,
	}[name] + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	return []byte(content)
}

// TestNewerProtocolRefused: a directory one of whose files says protocol 2
// is refused by every call that writes or admits, with an error naming the
// file and both numbers and wrapping ErrNewerProtocol, and the file is left
// as it is; Status reports it in a warning.
func TestNewerProtocolRefused(t *testing.T) {
	calls := []struct {
		name string
		call func(dir string) error
	}{
		{"Acquire", func(dir string) error { r, err := Acquire(dir); release(r); return err }},
		{"Takeover", func(dir string) error {
			r, err := Takeover(background(t), dir, TakeoverOptions{})
			release(r)
			return err
		}},
		{"Start", func(dir string) error {
			_, err := Start(background(t), dir, exec.Command(filepath.Join(dir, "never-run")), StartOptions{})
			return err
		}},
		{"RequestRestart", func(dir string) error { return RequestRestart(dir, RestartNow) }},
		{"ClearStale", func(dir string) error { _, _, err := ClearStale(dir); return err }},
		{"WriteLingering", func(dir string) error { return WriteLingering(dir, Lingering{}) }},
		{"EndLingering", func(dir string) error { _, _, err := EndLingering(dir); return err }},
	}
	for _, name := range append(protocolLockFiles, protocolStateFiles...) {
		for _, c := range calls {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				dir := tempDir(t)
				want := newerFile(t, dir, name)
				err := c.call(dir)
				require.ErrorIs(t, err, ErrNewerProtocol)
				assert.ErrorContains(t, err, filepath.Join(dir, name)+" says protocol 2, and this build speaks protocol 1")
				got, rerr := os.ReadFile(filepath.Join(dir, name))
				require.NoError(t, rerr)
				assert.Equal(t, string(want), string(got), "the file is left as it is")
				_, serr := os.Stat(filepath.Join(dir, "never-run.log"))
				assert.True(t, errors.Is(serr, os.ErrNotExist))
			})
		}
	}
	for _, name := range protocolStateFiles {
		t.Run(name+"/Status", func(t *testing.T) {
			dir := tempDir(t)
			newerFile(t, dir, name)
			r, err := Status(dir)
			require.NoError(t, err)
			assert.Contains(t, strings.Join(r.Warnings, "\n"), "says protocol 2, and this build speaks protocol 1")
		})
	}
	t.Run("Publish", func(t *testing.T) {
		dir := tempDir(t)
		r, err := Acquire(dir)
		require.NoError(t, err)
		defer r()
		newerFile(t, dir, gateName)
		err = Publish(dir, Record{})
		require.ErrorIs(t, err, ErrNewerProtocol)
		_, serr := os.Stat(filepath.Join(dir, RecordName))
		assert.True(t, errors.Is(serr, os.ErrNotExist), "nothing published")
	})
}

// release calls r when it is set.
func release(r func()) {
	if r != nil {
		r()
	}
}

// TestRunningReportsANewerHolder: a held directory whose runner.json says
// protocol 2 is running, named by its pid only, with an error wrapping
// ErrNewerProtocol; Start refuses it rather than hand back a record it
// cannot read.
func TestRunningReportsANewerHolder(t *testing.T) {
	dir := tempDir(t)
	holder := startChild(t, "unpublished-holder", dir)
	holder.Expect("acquired")
	data, err := os.ReadFile(filepath.Join(dir, LockName))
	require.NoError(t, err)
	id, ok := parseLockContent(data)
	require.True(t, ok)
	line, err := protocolLine(Record{PID: id.PID, Process: id, Ready: true, Specs: []string{"newer"}})
	require.NoError(t, err)
	line = []byte(strings.Replace(string(line), `"protocol":1`, `"protocol":2`, 1))
	require.NoError(t, os.WriteFile(filepath.Join(dir, RecordName), line, 0o644))

	rec, held, err := Running(dir)
	assert.True(t, held)
	assert.Equal(t, Record{PID: id.PID}, rec)
	require.ErrorIs(t, err, ErrNewerProtocol)
	assert.ErrorContains(t, err, "says protocol 2, and this build speaks protocol 1")
	_, err = Start(background(t), dir, exec.Command(filepath.Join(dir, "never-run")), StartOptions{})
	assert.ErrorIs(t, err, ErrNewerProtocol)
}

// TestStatusSaysAHolderPredatesTheTreeLock: a holder of runner.lock that
// holds no tree.lock (as v0.1 did) gets a warning in Status, after the
// settle time, that its jobs are not tracked; a current runner, and one
// whose runner.json Status cannot use, get none.
func TestStatusSaysAHolderPredatesTheTreeLock(t *testing.T) {
	const warning = "it predates the tree lock"
	t.Run("lock only", func(t *testing.T) {
		dir := tempDir(t)
		old := startChild(t, "runner-lock-only", dir)
		old.Expect("locked")
		r, err := Status(dir)
		require.NoError(t, err)
		assert.True(t, r.Held)
		assert.Equal(t, old.PID(), r.Holder.PID)
		w := strings.Join(r.Warnings, "\n")
		assert.Contains(t, w, fmt.Sprintf("pid %d has held %s for over 200ms without %s: %s", old.PID(), filepath.Join(dir, LockName), filepath.Join(dir, treeLockName), warning))
		assert.Contains(t, w, "jobs it runs are not tracked")
	})
	t.Run("current runner", func(t *testing.T) {
		dir := tempDir(t)
		cur := startChild(t, "unpublished-holder", dir) // Acquire: no runner.json, so Status takes the slow path
		cur.Expect("acquired")
		r, err := Status(dir)
		require.NoError(t, err)
		assert.True(t, r.Held)
		assert.NotContains(t, strings.Join(r.Warnings, "\n"), warning)
	})
}
