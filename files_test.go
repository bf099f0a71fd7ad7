//go:build unix || windows

package runnerstate

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSaveLoadLines(t *testing.T) {
	dir := tempDir(t)
	lines, err := LoadLines(dir, "cursor")
	require.NoError(t, err)
	assert.Nil(t, lines, "never saved")

	require.NoError(t, SaveLines(dir, "cursor", nil))
	lines, err = LoadLines(dir, "cursor")
	require.NoError(t, err)
	assert.NotNil(t, lines)
	assert.Empty(t, lines)

	want := []string{"a", "", "# comment", "b c"}
	require.NoError(t, SaveLines(dir, "cursor", want))
	lines, err = LoadLines(dir, "cursor")
	require.NoError(t, err)
	assert.Equal(t, want, lines)
	fi, err := os.Stat(filepath.Join(dir, "cursor"))
	require.NoError(t, err)
	if unixFiles {
		assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "state files are 0644 (under the usual umask 022)")
	}
	assertNoTemps(t, dir)

	err = SaveLines(dir, "cursor", []string{"a\nb"})
	assert.ErrorContains(t, err, "newline")
	lines, _ = LoadLines(dir, "cursor")
	assert.Equal(t, want, lines, "a refused save changes nothing")
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, durable.IsTemp(e.Name()), "a temporary file was left behind: %s", e.Name())
	}
}

func TestStateNamesRefused(t *testing.T) {
	dir := tempDir(t)
	for _, name := range []string{"", ".", "..", "a/b", `a\b`, "x\x00", LockName, RecordName, RestartName, gateName, durable.TempPrefix("state") + "1"} {
		assert.Error(t, SaveLines(dir, name, []string{"x"}), "name %q", name)
		_, err := LoadLines(dir, name)
		assert.Error(t, err, "name %q", name)
		assert.Error(t, AppendLine(dir, name, "x"), "name %q", name)
	}
}

func TestAppendLineKeepsEverything(t *testing.T) {
	dir := tempDir(t)
	path := filepath.Join(dir, "log")
	require.NoError(t, os.WriteFile(path, []byte("# hand-written comment\nunknown: line\nno newline at end"), 0o644))
	require.NoError(t, AppendLine(dir, "log", "new"))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "# hand-written comment\nunknown: line\nno newline at end\nnew\n", string(data))
	assert.ErrorContains(t, AppendLine(dir, "log", "two\nlines"), path)

	require.NoError(t, AppendLine(dir, "fresh", "first"))
	lines, err := LoadLines(dir, "fresh")
	require.NoError(t, err)
	assert.Equal(t, []string{"first"}, lines)
	assertNoTemps(t, dir)
}

func TestConcurrentAppendsDropNothing(t *testing.T) {
	dir := tempDir(t)
	const perWriter = 40
	var kids []*child
	for w := range 3 {
		t.Setenv("RUNNERSTATE_TEST_N", strconv.Itoa(perWriter))
		t.Setenv("RUNNERSTATE_TEST_TAG", "p"+strconv.Itoa(w))
		kids = append(kids, startChild(t, "append", dir))
	}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				assert.NoError(t, AppendLine(dir, "log", fmt.Sprintf("g%d %d", g, i)))
			}
		}()
	}
	wg.Wait()
	for _, k := range kids {
		k.Expect("appended")
		require.NoError(t, k.Wait())
	}
	lines, err := LoadLines(dir, "log")
	require.NoError(t, err)
	require.Len(t, lines, 6*perWriter)
	seen := map[string]bool{}
	for _, l := range lines {
		assert.False(t, seen[l], "duplicate line %q", l)
		seen[l] = true
	}
	// Each writer's lines are in its own order.
	byWriter := map[string][]int{}
	for _, l := range lines {
		f := strings.Fields(l)
		i, _ := strconv.Atoi(f[1])
		byWriter[f[0]] = append(byWriter[f[0]], i)
	}
	for w, is := range byWriter {
		assert.True(t, sort.IntsAreSorted(is), "writer %s out of order", w)
	}
	assertNoTemps(t, dir)
}

func TestMigrateFile(t *testing.T) {
	t.Run("renames", func(t *testing.T) {
		dir := tempDir(t)
		require.NoError(t, SaveLines(dir, "old", []string{"x"}))
		require.NoError(t, MigrateFile(dir, "old", "new"))
		assert.NoFileExists(t, filepath.Join(dir, "old"))
		lines, _ := LoadLines(dir, "new")
		assert.Equal(t, []string{"x"}, lines)
	})
	t.Run("existing new name wins", func(t *testing.T) {
		dir := tempDir(t)
		require.NoError(t, SaveLines(dir, "old", []string{"old"}))
		require.NoError(t, SaveLines(dir, "new", []string{"new"}))
		require.NoError(t, MigrateFile(dir, "old", "new"))
		assert.NoFileExists(t, filepath.Join(dir, "old"))
		lines, _ := LoadLines(dir, "new")
		assert.Equal(t, []string{"new"}, lines)
	})
	t.Run("directory at old name stays", func(t *testing.T) {
		dir := tempDir(t)
		require.NoError(t, os.Mkdir(filepath.Join(dir, "old"), 0o755))
		require.NoError(t, MigrateFile(dir, "old", "new"))
		assert.DirExists(t, filepath.Join(dir, "old"))
		assert.NoFileExists(t, filepath.Join(dir, "new"))
	})
	t.Run("nothing to migrate", func(t *testing.T) {
		require.NoError(t, MigrateFile(tempDir(t), "old", "new"))
	})
	t.Run("symlink refused", func(t *testing.T) {
		needSymlinks(t)
		dir, victim := tempDir(t), victimFile(t)
		require.NoError(t, os.Symlink(victim, filepath.Join(dir, "old")))
		assert.ErrorContains(t, MigrateFile(dir, "old", "new"), filepath.Join(dir, "old"))
		assertVictim(t, victim)
	})
	t.Run("racing callers all succeed", func(t *testing.T) {
		dir := tempDir(t)
		require.NoError(t, SaveLines(dir, "old", []string{"x"}))
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.NoError(t, MigrateFile(dir, "old", "new"))
			}()
		}
		wg.Wait()
		lines, _ := LoadLines(dir, "new")
		assert.Equal(t, []string{"x"}, lines)
		assert.NoFileExists(t, filepath.Join(dir, "old"))
	})
}

func TestLeftoverTempFiles(t *testing.T) {
	dir := tempDir(t)
	// A writer that is gone (this pid with other start ticks), young: removed.
	gone := filepath.Join(dir, durable.TempPrefix("state")+strconv.Itoa(os.Getpid())+"-1-"+strings.Split(durable.WriterTag(), "-")[2]+"-aaaa")
	// A writer we cannot judge (another boot or namespace), young: kept.
	foreign := filepath.Join(dir, durable.TempPrefix("state")+"1-1-ffffffff-bbbb")
	// The same, but older than a minute: removed.
	old := filepath.Join(dir, durable.TempPrefix("state")+"2-1-ffffffff-cccc")
	// Another file's temporary: never touched.
	other := filepath.Join(dir, durable.TempPrefix("other")+"2-1-ffffffff-dddd")
	for _, p := range []string{gone, foreign, old, other} {
		require.NoError(t, os.WriteFile(p, []byte("partial"), 0o644))
	}
	long := time.Now().Add(-2 * time.Minute)
	require.NoError(t, os.Chtimes(old, long, long))
	require.NoError(t, os.Chtimes(other, long, long))

	require.NoError(t, SaveLines(dir, "state", []string{"x"}))
	assert.NoFileExists(t, gone)
	assert.FileExists(t, foreign)
	assert.NoFileExists(t, old)
	assert.FileExists(t, other)
}

func TestLoadLinesRefusesHugeFile(t *testing.T) {
	dir := tempDir(t)
	f, err := os.Create(filepath.Join(dir, "big"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(maxStateSize+1))
	f.Close()
	_, err = LoadLines(dir, "big")
	assert.ErrorContains(t, err, filepath.Join(dir, "big"))
	assert.ErrorContains(t, err, "64 MiB")
}

func TestLongStateNames(t *testing.T) {
	dir := tempDir(t)
	name := strings.Repeat("n", 240)
	require.NoError(t, SaveLines(dir, name, []string{"a"}))
	require.NoError(t, AppendLine(dir, name, "b"))
	lines, err := LoadLines(dir, name)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, lines)
	assertNoTemps(t, dir)
}

// TestReservedNamesAreTheDirectorysFiles: the state-file calls refuse
// exactly the files of dirFiles: each single file, a set-aside copy of each
// state file that has them, and a temporary file; a name beside them is a
// state file of the caller's.
func TestReservedNamesAreTheDirectorysFiles(t *testing.T) {
	var reserved []string
	for _, f := range dirFiles {
		switch f.kind {
		case kindSetAside:
			require.NotEmpty(t, f.of, "%s names the files it sets aside", f.name)
			for _, of := range f.of {
				reserved = append(reserved, of+corruptSuffix, of+corruptSuffix+"-20260102T030405.000000000Z")
			}
		case kindTemp:
			reserved = append(reserved, durable.TempPrefix("state")+durable.WriterTag()+"-1")
		default:
			assert.Equal(t, filepath.Base(f.name), f.name, "a plain file name")
			reserved = append(reserved, f.name)
		}
		assert.NotZero(t, f.mode&fs.ModePerm, "%s has a mode", f.name)
		assert.NotEmpty(t, f.writer, "%s has a writer", f.name)
		assert.NotEmpty(t, f.purpose, "%s has a purpose", f.name)
	}
	for _, name := range reserved {
		assert.True(t, reservedName(name), "%s is reserved", name)
	}
	for _, name := range []string{"state", "runner.json.bak", "corrupt", "gate", "runner.lock2", "x.corrupt-1", "tmp-1"} {
		assert.False(t, reservedName(name), "%s is the caller's", name)
	}
	dir := tempDir(t)
	for _, name := range reserved {
		assert.ErrorContains(t, SaveLines(dir, name, []string{"x"}), "managed by runnerstate itself", "name %q", name)
	}
}

// TestDirFilesHaveTheirModes: the files a runner, a scope and a sync make
// have the modes dirFiles gives them, less the umask's bits.
func TestDirFilesHaveTheirModes(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no mode bits on Windows")
	}
	ctx := context.Background()
	root := tempDir(t)
	dir, scope, data := filepath.Join(root, "runner"), filepath.Join(root, "scope"), filepath.Join(root, "data")
	release, err := Takeover(ctx, dir, TakeoverOptions{})
	require.NoError(t, err)
	require.NoError(t, Publish(dir, Record{Specs: []string{"modes"}}))
	require.NoError(t, RequestRestart(dir, RestartDrain))
	releaseScope, err := AcquireScope(ctx, scope, data)
	require.NoError(t, err)
	releaseSync, err := SyncRunning(ctx, data)
	require.NoError(t, err)
	umask := currentUmask(t, root)
	seen := 0
	for _, f := range dirFiles {
		if f.family() {
			continue
		}
		for _, d := range map[dirHome][]string{homeRunner: {dir}, homeScope: {scope}, homeDataRoot: {data}}[f.home] {
			fi, err := os.Lstat(filepath.Join(d, f.name))
			if err != nil {
				continue // not made by these calls (Start's files)
			}
			seen++
			want := f.mode.Perm() &^ umask
			if slices.Contains(toAllFiles, f.name) {
				want = f.mode.Perm() // whatever the umask
			}
			assert.Equal(t, want, fi.Mode().Perm(), "%s's mode", f.name)
		}
	}
	assert.GreaterOrEqual(t, seen, 9, "the calls made most of the files")
	releaseSync()
	releaseScope()
	release()
}

// toAllFiles are the state files every local user may read: 0644 whatever
// the umask.
var toAllFiles = []string{RecordName, RestartName, gateName, startName}

// currentUmask is the process's umask, read as the mode a file created
// 0777 in dir gets.
func currentUmask(t *testing.T, dir string) fs.FileMode {
	p := filepath.Join(dir, "umask-probe")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o777)
	require.NoError(t, err)
	fi, err := f.Stat()
	require.NoError(t, f.Close())
	require.NoError(t, err)
	require.NoError(t, os.Remove(p))
	return 0o777 &^ fi.Mode().Perm()
}
