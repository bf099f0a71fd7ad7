//go:build unix || windows

package runnerstate

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readRecordFile(t *testing.T, dir string) Record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, RecordName))
	require.NoError(t, err)
	var rec Record
	require.NoError(t, json.Unmarshal(data, &rec))
	return rec
}

func TestAcquirePublishRunning(t *testing.T) {
	dir := filepath.Join(tempDir(t), "new", "dir")
	release, err := Acquire(dir)
	require.NoError(t, err, "Acquire creates dir")
	require.NoError(t, Publish(dir, Record{MaxParallel: 3, Specs: []string{"a", "b"}, Meta: json.RawMessage(`{"k":1}`)}))

	rec := readRecordFile(t, dir)
	self := Self()
	assert.Equal(t, os.Getpid(), rec.PID)
	assert.Equal(t, self.Instance, rec.Process.Instance)
	assert.Equal(t, 3, rec.MaxParallel)
	assert.False(t, rec.StartedAt.IsZero())

	got, ok, err := Running(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, rec.PID, got.PID)
	assert.Equal(t, []string{"a", "b"}, got.Specs)
	assert.JSONEq(t, `{"k":1}`, string(got.Meta))

	if lockFileReadable {
		lockLine, err := os.ReadFile(filepath.Join(dir, LockName))
		require.NoError(t, err)
		id, ok := parseLockContent(lockLine)
		require.True(t, ok)
		assert.Equal(t, self.Instance, id.Instance)
	}

	_, err = Acquire(dir)
	var be *BusyError
	require.ErrorAs(t, err, &be, "a second Acquire in the same process is refused")
	assert.Equal(t, os.Getpid(), be.PID)
	assert.True(t, be.Verified)
	assert.Contains(t, err.Error(), filepath.Join(dir, LockName))

	release()
	release()
	_, ok, err = Running(dir)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.NoFileExists(t, filepath.Join(dir, RecordName))
	assert.FileExists(t, filepath.Join(dir, LockName), "the lock file is never removed")
	content, _ := os.ReadFile(filepath.Join(dir, LockName))
	assert.Empty(t, content, "release clears the lock file's content")
	assert.ErrorIs(t, Publish(dir, Record{}), ErrNotHolder)
}

// Case: runner.json names this very process's pid but a different start
// identity (a container restart gives the same pid every time); the lock is
// free. Acquire succeeds at once and clears the record.
func TestAcquireSamePIDOtherStartIdentity(t *testing.T) {
	dir := tempDir(t)
	self := Self()
	old := self
	old.Instance = "0123456789abcdef0123456789abcdef"
	old.StartTicks = self.StartTicks - 1
	writeJSON(t, filepath.Join(dir, RecordName), Record{PID: self.PID, Process: old})
	writeJSON(t, filepath.Join(dir, LockName), old)
	logs := acquireClearsTheRecord(t, dir)
	assert.Contains(t, logs, "verdict=stale")
}

// Case: a forged runner.json, {"pid":1}, names a pid and no process
// identity; the lock is free. Acquire clears it, and the log says why it
// proved nothing, not "no pid".
func TestAcquireClearsARecordWithoutAProcessIdentity(t *testing.T) {
	dir := tempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, RecordName), []byte(`{"pid":1}`), 0o644))
	logs := acquireClearsTheRecord(t, dir)
	assert.Contains(t, logs, "pid=1 ")
	assert.Contains(t, logs, `why="the record names pid 1 but no process identity, so it proves nothing"`)
	assert.NotContains(t, logs, `why="no pid"`)
}

// acquireClearsTheRecord acquires dir, whose lock is free, checks that the
// admission cleared its stale runner.json and said so, and returns the log.
func acquireClearsTheRecord(t *testing.T, dir string) string {
	t.Helper()
	logs := captureLog(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	assert.NoFileExists(t, filepath.Join(dir, RecordName))
	assert.Contains(t, logs.String(), "cleared a stale record")
	return logs.String()
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, append(data, '\n'), 0o644))
}

// Case: runner.json is empty, "{", garbage, "0", or 1.5 KB of NUL bytes (a
// power loss without fsync). The lock is free: Acquire succeeds and logs what
// it set aside. No pid <= 0 is ever probed or signalled.
func TestAcquireCorruptRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content []byte
	}{
		{"empty", nil},
		{"open brace", []byte("{")},
		{"garbage", []byte("\x8f\x00garbage\xff{]")},
		{"zero", []byte("0")},
		{"pid zero", []byte(`{"pid":0}`)},
		{"negative pid", []byte(`{"pid":-1,"process":{"pid":-1}}`)},
		{"nul bytes", bytes.Repeat([]byte{0}, 1536)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tempDir(t)
			path := filepath.Join(dir, RecordName)
			require.NoError(t, os.WriteFile(path, tc.content, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, LockName), tc.content, 0o644))
			logs := captureLog(t)
			var probed []int
			defer liveness.SetProbeHook(func(pid int) { probed = append(probed, pid) })()

			assert.Empty(t, StalePIDs(dir))
			st, err := Status(dir)
			require.NoError(t, err)
			assert.False(t, st.Held)
			assert.NotEmpty(t, st.Warnings)

			release, err := Acquire(dir)
			require.NoError(t, err)
			assert.NoFileExists(t, path)
			aside, err := os.ReadFile(setAsideCopy(t, dir, RecordName))
			require.NoError(t, err, "the unreadable record is set aside, not discarded")
			assert.Equal(t, string(tc.content), string(aside))
			assert.Contains(t, logs.String(), "set aside an unreadable runner record")
			release()
			for _, pid := range probed {
				assert.Greater(t, pid, 0, "a pid <= 0 was probed")
			}
		})
	}
}

// Case: a runner starts a long-lived child process (plain exec.Command) and
// is then killed (SIGKILL; TerminateProcess on Windows). A new Acquire
// succeeds at once: the child never inherited the lock.
func TestChildNeverInheritsLock(t *testing.T) {
	dir := tempDir(t)
	runner := startChild(t, "acquire", dir)
	runner.Expect("acquired")
	runner.Send("spawn")
	sleepPID, err := strconv.Atoi(runner.Expect("spawned"))
	require.NoError(t, err)
	sleeper, err := os.FindProcess(sleepPID)
	require.NoError(t, err)
	t.Cleanup(func() { sleeper.Kill(); sleeper.Release() })
	sleeperID, err := liveness.Lookup(sleepPID)
	require.NoError(t, err)

	runner.Kill()
	runner.Wait()
	release, err := Acquire(dir)
	require.NoError(t, err, "the runner's child must not hold the lock")
	release()
	v, why := liveness.Check(sleeperID)
	assert.Equal(t, liveness.Alive, v, "the runner's child is still alive: %s", why)
}

// Case: a process holds the lock; it opens runner.lock for reading, reads it
// and closes it (as os.ReadFile does) in its own process. A third process is
// still refused (fcntl locks would have been dropped; flock locks are not,
// nor are LockFileEx locks, though on Windows the read itself is refused).
func TestReadingLockFileKeepsLock(t *testing.T) {
	dir := tempDir(t)
	runner := startChild(t, "acquire", dir)
	runner.Expect("acquired")
	runner.Send("read")
	readErr := runner.Expect("read")
	// And this process reads it too.
	_, err := os.ReadFile(filepath.Join(dir, LockName))
	if lockFileReadable {
		assert.Empty(t, readErr)
		require.NoError(t, err)
	}

	third := startChild(t, "try-acquire", dir)
	assert.Equal(t, strconv.Itoa(runner.PID()), third.Expect("busy"))
	require.NoError(t, third.Wait())
	require.NoError(t, runner.Stop())
}

// Case: a symlink at runner.lock, runner.json or the temporary path, pointing
// at a victim file, is refused with an error naming the path; the victim is
// unchanged.
func TestSymlinksRefused(t *testing.T) {
	t.Run("runner.lock", func(t *testing.T) {
		needSymlinks(t)
		dir, victim := tempDir(t), victimFile(t)
		link := filepath.Join(dir, LockName)
		require.NoError(t, os.Symlink(victim, link))
		_, err := Acquire(dir)
		require.Error(t, err)
		assert.Contains(t, err.Error(), link)
		assert.Contains(t, err.Error(), "symlink")
		_, _, err = Running(dir)
		assert.ErrorContains(t, err, link)
		_, err = Status(dir)
		assert.ErrorContains(t, err, link)
		_, _, err = ClearStale(dir)
		assert.ErrorContains(t, err, link)
		assertVictim(t, victim)
	})
	t.Run("runner.json", func(t *testing.T) {
		needSymlinks(t)
		dir, victim := tempDir(t), victimFile(t)
		release, err := Acquire(dir)
		require.NoError(t, err)
		defer release()
		link := filepath.Join(dir, RecordName)
		require.NoError(t, os.Symlink(victim, link))
		err = Publish(dir, Record{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), link)
		assertVictim(t, victim)
	})
	t.Run("stale runner.json symlink is set aside", func(t *testing.T) {
		needSymlinks(t)
		dir, victim := tempDir(t), victimFile(t)
		link := filepath.Join(dir, RecordName)
		require.NoError(t, os.Symlink(victim, link))
		release, err := Acquire(dir)
		require.NoError(t, err)
		release()
		assert.NoFileExists(t, link)
		assertVictim(t, victim)
	})
	t.Run("temporary file", func(t *testing.T) {
		needSymlinks(t)
		dir, victim := tempDir(t), victimFile(t)
		defer durable.SetTempRandom(func() string { return "planted" })()
		tmp := filepath.Join(dir, durable.TempPrefix("state")+durable.WriterTag()+"-planted")
		require.NoError(t, os.Symlink(victim, tmp))
		err := SaveLines(dir, "state", []string{"x"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), tmp)
		assertVictim(t, victim)
		assert.NoFileExists(t, filepath.Join(dir, "state"))
	})
}

func victimFile(t *testing.T) string {
	p := filepath.Join(tempDir(t), "victim")
	require.NoError(t, os.WriteFile(p, []byte("precious"), 0o644))
	return p
}

func assertVictim(t *testing.T, p string) {
	t.Helper()
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "precious", string(data), "the symlink's target was modified")
}

// Case: Running hammered from one process while others Acquire and release in
// a loop: no Acquire ever fails because of a probe, and Running never reports
// a record that does not name the holder.
func TestRunningNeverInterferes(t *testing.T) {
	var dirs []string
	var loops []*child
	for range 2 {
		dir := tempDir(t)
		c := startChild(t, "acquire-loop", dir)
		c.Expect("looping")
		dirs, loops = append(dirs, dir), append(loops, c)
	}
	seenRecord, seenHeld := 0, 0
	for i := 0; i < 4000; i++ {
		k := i % len(dirs)
		rec, ok, err := Running(dirs[k])
		require.NoError(t, err)
		if ok {
			seenHeld++
			if rec.PID != 0 {
				assert.Equal(t, loops[k].PID(), rec.PID)
			}
			if rec.Process.Instance != "" {
				seenRecord++
				assert.Equal(t, loops[k].PID(), rec.Process.PID)
			}
		}
		if i%3 == 0 {
			_, err := Status(dirs[k])
			require.NoError(t, err)
		}
	}
	for _, c := range loops {
		c.Send("stop")
		f := strings.Fields(c.Expect("done"))
		require.Len(t, f, 2)
		assert.Equal(t, "0", f[1], "an Acquire failed while only probes competed")
		assert.NotEqual(t, "0", f[0])
		require.NoError(t, c.Stop())
	}
	t.Logf("probes saw the lock held %d times, with a verified record %d times", seenHeld, seenRecord)
}

func TestRunningReportsOnlyVerifiedRecords(t *testing.T) {
	dir := tempDir(t)
	runner := startChild(t, "acquire", dir)
	runner.Expect("acquired")
	rec, ok, err := Running(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, runner.PID(), rec.PID)
	assert.Equal(t, []string{"demo"}, rec.Specs)

	if !lockFileReadable {
		// Windows: the lock file carries no identity, so runner.json alone
		// names the holder, and a forged one cannot be told from it.
		require.NoError(t, runner.Stop())
		_, ok, err = Running(dir)
		require.NoError(t, err)
		assert.False(t, ok)
		return
	}

	// A record rewritten to name another process incarnation (the same pid,
	// other start ticks) is not reported: the lock file's identity is the
	// holder's. (What the kernel cannot check, the random Instance, is not
	// evidence: a record whose pid, start ticks, boot and PID namespace are
	// the verified holder's, and whose lock descriptor the holder's fdinfo
	// confirms, is the holder's.)
	forged := rec
	forged.Process.StartTicks++
	writeJSON(t, filepath.Join(dir, RecordName), forged)
	rec, ok, err = Running(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Record{PID: runner.PID()}, rec)

	// A lock file with only a bare pid (an older runner) names the holder
	// the kernel confirms, but cannot verify it.
	require.NoError(t, os.WriteFile(filepath.Join(dir, LockName), []byte(strconv.Itoa(runner.PID())+"\n"), 0o644))
	rec, ok, err = Running(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Record{PID: runner.PID()}, rec)
	st, err := Status(dir)
	require.NoError(t, err)
	assert.True(t, st.Held)
	assert.False(t, st.Verified)
	assert.Equal(t, "unverifiable", st.Verdict)

	// A lock file naming some other live process: the kernel's pid wins.
	writeJSON(t, filepath.Join(dir, LockName), Self())
	rec, ok, err = Running(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Record{PID: runner.PID()}, rec)

	require.NoError(t, runner.Stop())
	_, ok, err = Running(dir)
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestRunningCreatesNothing(t *testing.T) {
	dir := filepath.Join(tempDir(t), "absent")
	_, ok, err := Running(dir)
	require.NoError(t, err)
	assert.False(t, ok)
	st, err := Status(dir)
	require.NoError(t, err)
	assert.False(t, st.Held)
	assert.NoDirExists(t, dir)

	dir = tempDir(t)
	_, _, err = Running(dir)
	require.NoError(t, err)
	_, err = Status(dir)
	require.NoError(t, err)
	entries, _ := os.ReadDir(dir)
	assert.Empty(t, entries)
}

func TestClearStale(t *testing.T) {
	dir := tempDir(t)
	pid, cleared, err := ClearStale(dir)
	require.NoError(t, err)
	assert.False(t, cleared)
	assert.Zero(t, pid)

	// A dead runner's leftovers: cleared, and its pid returned.
	runner := startChild(t, "acquire", dir)
	runner.Expect("acquired")
	dead := runner.PID()
	runner.Kill()
	runner.Wait()
	assert.Equal(t, []int{dead}, StalePIDs(dir))
	pid, cleared, err = ClearStale(dir)
	require.NoError(t, err)
	assert.True(t, cleared)
	assert.Equal(t, dead, pid)
	assert.NoFileExists(t, filepath.Join(dir, RecordName))
	assert.FileExists(t, filepath.Join(dir, LockName))
	assert.Empty(t, StalePIDs(dir))

	// Only the lock file names it (an older runner's bare pid). Windows
	// lock files carry nothing, so there their content is never read.
	if lockFileReadable {
		require.NoError(t, os.WriteFile(filepath.Join(dir, LockName), []byte("4194304\n"), 0o644))
		pid, cleared, err = ClearStale(dir)
		require.NoError(t, err)
		assert.True(t, cleared)
		assert.Equal(t, 4194304, pid)
	}

	// A live runner: its pid and a busy error.
	live := startChild(t, "acquire", dir)
	live.Expect("acquired")
	pid, cleared, err = ClearStale(dir)
	assert.ErrorIs(t, err, ErrBusy)
	assertWouldBlock(t, err)
	assert.False(t, cleared)
	assert.Equal(t, live.PID(), pid)
	assert.FileExists(t, filepath.Join(dir, RecordName), "a live runner's record is left alone")
	require.NoError(t, live.Stop())
}

func TestAcquireRefusesOddDirs(t *testing.T) {
	file := filepath.Join(tempDir(t), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err := Acquire(file)
	assert.ErrorContains(t, err, file)
	assert.ErrorContains(t, err, "not a directory")

	dir := tempDir(t)
	require.NoError(t, os.Mkdir(filepath.Join(dir, LockName), 0o755))
	_, err = Acquire(dir)
	assert.ErrorContains(t, err, filepath.Join(dir, LockName))
	assert.ErrorContains(t, err, "directory")
	_, _, err = Running(dir)
	assert.ErrorContains(t, err, filepath.Join(dir, LockName))
}

func TestAcquireRetiresOnlyOthersRestartRequests(t *testing.T) {
	dir := tempDir(t)
	write := func(req restartRequest) {
		writeJSON(t, filepath.Join(dir, RestartName), req)
	}
	// Made for another runner instance: retired.
	write(restartRequest{Mode: RestartNow, RequestedAt: time.Now(), For: "another"})
	release, err := Acquire(dir)
	require.NoError(t, err)
	_, ok := RestartRequested(dir)
	assert.False(t, ok)
	release()

	// Made before this acquisition, for nobody: retired.
	write(restartRequest{Mode: RestartDrain, RequestedAt: time.Now().Add(-time.Second)})
	release, err = Acquire(dir)
	require.NoError(t, err)
	_, ok = RestartRequested(dir)
	assert.False(t, ok)
	release()

	// Made while this runner was being admitted: kept for it.
	since := time.Now()
	write(restartRequest{Mode: RestartDrain, RequestedAt: time.Now()})
	h, err := acquire(dir, since)
	require.NoError(t, err)
	mode, ok := RestartRequested(dir)
	assert.True(t, ok)
	assert.Equal(t, RestartDrain, mode)
	h.Release()
}

func init() { registerRole("try-acquire", roleTryAcquire) }

// try-acquire: one Acquire; says "acquired" (and releases) or "busy <pid>".
func roleTryAcquire(dir string) int {
	release, err := Acquire(dir)
	if err != nil {
		var be *BusyError
		if errors.As(err, &be) {
			say("busy %d", be.PID)
			return 0
		}
		say("error %v", err)
		return 1
	}
	release()
	say("acquired")
	return 0
}

func init() { registerRole("acquire-loop", roleAcquireLoop) }

// acquire-loop: Acquire, Publish, release, over and over, until told
// "stop"; then says "done <admitted> <refused>".
func roleAcquireLoop(dir string) int {
	cmds := commands()
	say("looping")
	ok, busy := 0, 0
	for {
		select {
		case <-cmds:
			say("done %d %d", ok, busy)
			return 0
		default:
		}
		release, err := Acquire(dir)
		if err != nil {
			if errors.Is(err, ErrBusy) {
				busy++
				continue
			}
			say("error %v", err)
			return 1
		}
		if err := Publish(dir, Record{}); err != nil {
			say("error %v", err)
			return 1
		}
		ok++
		release()
	}
}
