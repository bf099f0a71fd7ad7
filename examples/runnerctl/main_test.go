package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// runnerctl start's runners exit when each test ends; the package reaps
	// them in the background, as runnerstate.Start's doc says, and a reap
	// may still be finishing when the last test returns.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/runnerstate/runnerstate/internal/spawn.reap"),
		goleak.IgnoreAnyFunction("github.com/runnerstate/runnerstate/internal/spawn.awaitReady"))
}

// ctl runs runnerctl with args and returns its exit code and output.
func ctl(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Case: status answers like an LSB init script's status action, so a script
// can ask "is it running?" by the exit code alone.
func TestStatusExitCodes(t *testing.T) {
	dir := testharness.TempDir(t)
	code, out, _ := ctl("status", "--dir", dir)
	assert.Equal(t, exitNotRunning, code, "no runner: 3\n%s", out)
	code, _, _ = ctl("status", "--json", "--dir", dir)
	assert.Equal(t, exitNotRunning, code, "the same with --json")

	release, err := runnerstate.Acquire(dir)
	require.NoError(t, err)
	code, out, _ = ctl("status", "--dir", dir)
	assert.Equal(t, exitOK, code, "a runner: 0\n%s", out)
	release()

	file := filepath.Join(testharness.TempDir(t), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	code, _, errOut := ctl("status", "--dir", file)
	assert.Equal(t, exitUnknown, code, "cannot tell: 4")
	assert.Contains(t, errOut, file)
}

// Case: --help on every command exits 0 and lists the exit codes; so do
// "runnerctl --help" and "runnerctl help <command>".
func TestHelpExitsZeroAndListsExitCodes(t *testing.T) {
	var calls [][]string
	for name := range commands {
		calls = append(calls, []string{name, "--help"}, []string{name, "-h"}, []string{"help", name})
	}
	calls = append(calls, []string{"--help"}, []string{"-h"}, []string{"help"})
	for _, args := range calls {
		code, out, errOut := ctl(args...)
		assert.Equal(t, exitOK, code, "runnerctl %v", args)
		assert.Contains(t, out, "exit codes", "runnerctl %v prints its exit codes on stdout", args)
		assert.Empty(t, errOut, "runnerctl %v", args)
	}
	code, _, _ := ctl()
	assert.Equal(t, exitUsage, code, "no command is a usage error")
	code, _, _ = ctl("status", "--bogus")
	assert.Equal(t, exitUsage, code)
}

// Case: a directory name with a newline or a terminal escape can neither
// break the table nor fake a line of it. (Windows refuses such names: there
// only the argument that names none is checked.)
func TestControlCharactersAreEscaped(t *testing.T) {
	if runtime.GOOS != "windows" {
		dir := filepath.Join(testharness.TempDir(t), "a\nrunner  pid 1, verified alive\x1b[2J")
		release, err := runnerstate.Acquire(dir)
		require.NoError(t, err)
		defer release()
		code, out, _ := ctl("status", "--dir", dir)
		require.Equal(t, exitOK, code, out)
		assert.NotContains(t, out, "\x1b")
		assert.Contains(t, out, `\n`)
		assert.Contains(t, out, `\x1b`)
		assert.Equal(t, 1, strings.Count(out, "\nrunner "), "one runner row:\n%s", out)
	}

	code, _, errOut := ctl("status", "--dir", filepath.Join(testharness.TempDir(t), "x\x1by"), "extra")
	assert.Equal(t, exitUsage, code)
	assert.NotContains(t, errOut, "\x1b")
}

// Case: the JSON omits what is not there (a holder when none runs, zero
// times) and has [] for empty lists, never null.
func TestStatusJSONOmitsWhatIsNotThere(t *testing.T) {
	dir := testharness.TempDir(t)
	_, out, _ := ctl("status", "--json", "--dir", dir)
	assert.NotContains(t, out, `"holder"`, "nothing held, no holder")
	assert.NotContains(t, out, "0001-01-01")
	assert.NotContains(t, out, "null")
	for _, list := range []string{"waiting", "stale", "warnings"} {
		assert.Contains(t, out, `"`+list+`": []`)
	}

	release, err := runnerstate.Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, runnerstate.Publish(dir, runnerstate.Record{}))
	_, out, _ = ctl("status", "--json", "--dir", dir)
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	holder, ok := r["holder"].(map[string]any)
	require.True(t, ok, "a verified holder is reported:\n%s", out)
	assert.Contains(t, holder, "started_at")
	assert.NotContains(t, out, "0001-01-01")
	assert.NotContains(t, out, "null")
}

// Case: the text form says what --json says of a daemon server: its
// program, version and endpoints.
func TestStatusTextNamesProgramVersionEndpoints(t *testing.T) {
	dir := testharness.TempDir(t)
	release, err := runnerstate.Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, runnerstate.Publish(dir, runnerstate.Record{Program: "idxd", Version: "v1.4.2",
		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "/run/idxd.sock"}, {Network: "tcp", Address: "127.0.0.1:8080"}}}))
	code, out, _ := ctl("status", "--dir", dir)
	require.Equal(t, exitOK, code, out)
	assert.Regexp(t, `(?m)^program +idxd v1\.4\.2$`, out)
	assert.Regexp(t, `(?m)^endpoints +unix /run/idxd\.sock$`, out)
	assert.Regexp(t, `(?m)^ +tcp 127\.0\.0\.1:8080$`, out)
}

// Case: a lingering server (linger.json) has a row of its own, and its
// record in the JSON.
func TestStatusShowsALingeringServer(t *testing.T) {
	dir := testharness.TempDir(t)
	_, out, _ := ctl("status", "--dir", dir)
	assert.NotContains(t, out, "lingering")
	now := time.Now()
	require.NoError(t, runnerstate.WriteLingering(dir, runnerstate.Lingering{Since: now, Deadline: now.Add(time.Hour), KillAt: now.Add(2 * time.Hour), Open: 4}))
	require.NoError(t, runnerstate.WriteLingering(dir, runnerstate.Lingering{Since: now, Deadline: now.Add(time.Hour), KillAt: now.Add(2 * time.Hour), Open: 4, Retaking: true}))
	_, out, _ = ctl("status", "--dir", dir)
	assert.Regexp(t, `(?m)^lingering +pid `+strconv.Itoa(os.Getpid())+`, serving 4 open connection\(s\) until .*; retaking the directory`, out)
	_, out, _ = ctl("status", "--json", "--dir", dir)
	var r struct {
		Lingering *runnerstate.Lingering `json:"lingering"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.NotNil(t, r.Lingering, out)
	assert.Equal(t, 4, r.Lingering.Open)
	assert.True(t, r.Lingering.Retaking)
	require.NoError(t, runnerstate.RemoveLingering(dir))
}

// Case: an empty --dir is a usage error everywhere, never "the current
// directory" for some commands and an error for others.
func TestEmptyDir(t *testing.T) {
	for name := range commands {
		args := []string{name, "--dir", ""}
		if name == "restart" {
			args = append(args, "--now")
		}
		code, _, errOut := ctl(args...)
		assert.Equal(t, exitUsage, code, "runnerctl %s", name)
		assert.Contains(t, errOut, "--dir is empty", "runnerctl %s", name)
	}
}

func TestPrintable(t *testing.T) {
	cases := map[string]string{
		"/tmp/runnerstate-demo": "/tmp/runnerstate-demo",
		"/tmp/a b":              "/tmp/a b",
		"/tmp/é":                "/tmp/é",
		"/tmp/a\nb":             `"/tmp/a\nb"`,
		"/tmp/a\tb":             `"/tmp/a\tb"`,
		"/tmp/\x1b[2J":          `"/tmp/\x1b[2J"`,
		"/tmp/\xff":             `"/tmp/\xff"`,
		`/tmp/a\nb`:             `"/tmp/a\\nb"`,
		"/tmp/\u200b":           `"/tmp/\u200b"`,
		`C:\tmp\"x`:             `"C:\\tmp\\\"x"`,
	}
	if filepath.Separator == '\\' {
		// Every Windows path has backslashes; they print as themselves.
		cases[`/tmp/a\nb`] = `/tmp/a\nb`
		cases[`C:\Users\runner`] = `C:\Users\runner`
	}
	for in, want := range cases {
		assert.Equal(t, want, printable(in), "%q", in)
	}
}

// The runner row for each kind of holder: words that say what was seen, and
// never "unverified" beside "alive".
func TestRunnerWords(t *testing.T) {
	for _, tc := range []struct {
		r    runnerstate.Report
		want string
	}{
		{runnerstate.Report{}, "none"},
		{runnerstate.Report{Held: true, Verified: true, Holder: runnerstate.Record{PID: 7}}, "pid 7, verified alive"},
		{runnerstate.Report{Held: true, Verdict: "other-namespace"}, "held by a runner of another PID namespace, not visible from this one: never signalled"},
		{runnerstate.Report{Held: true}, "held by a process that cannot be named from here (see warnings)"},
		{runnerstate.Report{Held: true, Holder: runnerstate.Record{PID: 7}, Verdict: "foreign"}, "pid 7, on another machine: never signalled"},
		{runnerstate.Report{Held: true, Holder: runnerstate.Record{PID: 7}, Verdict: "other-namespace"}, "pid 7, in another PID namespace: never signalled"},
		{runnerstate.Report{Held: true, Holder: runnerstate.Record{PID: 7}, Verdict: "alive"}, "pid 7, not verified (see warnings)"},
	} {
		assert.Equal(t, tc.want, runnerWords(tc.r))
	}
}

// Case: on a filesystem whose locks do not exclude (NFS here, through the
// statfs hook), status cannot tell whether a runner runs: it exits 4, never
// 3, says so, and shows the filesystem.
func TestStatusOnAFilesystemThatDoesNotExclude(t *testing.T) {
	dir := testharness.TempDir(t)
	defer fsinfo.SetHook(func(d string) (fsinfo.Answer, bool) {
		return fsinfo.Answer{Type: "nfs4"}, d == dir
	})()
	code, out, _ := ctl("status", "--dir", dir)
	assert.Equal(t, exitUnknown, code, "cannot tell: 4\n%s", out)
	assert.Contains(t, out, "cannot tell")
	assert.Contains(t, out, "filesystem")
	assert.Contains(t, out, "nfs4")
	code, out, _ = ctl("status", "--json", "--dir", dir)
	assert.Equal(t, exitUnknown, code)
	var r runnerstate.Report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, "nfs4", r.Filesystem)
	assert.False(t, r.Held)

	defer runnerstate.TrustFilesystem("nfs4")()
	code, out, _ = ctl("status", "--dir", dir)
	assert.Equal(t, exitNotRunning, code, "trusted, it can tell: 3\n%s", out)
	assert.Contains(t, out, "nfs4")
}

// clear-stale of a record that cannot be read sets it aside and says so,
// without naming a pid it does not know.
func TestClearStaleOfAnUnreadableRecord(t *testing.T) {
	dir := testharness.TempDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "runner.json"), []byte("garbage"), 0o644))
	code, out, errOut := ctl("clear-stale", "--dir", dir)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "names no pid")
	assert.NotContains(t, out, "pid 0")
}

// Case: a mistyped --dir says "no such directory" in the text, and keeps
// the LSB code of a stopped runner, 3.
func TestStatusSaysNoSuchDirectory(t *testing.T) {
	dir := filepath.Join(testharness.TempDir(t), "mistyped")
	code, out, _ := ctl("status", "--dir", dir)
	assert.Equal(t, exitNotRunning, code, out)
	assert.Contains(t, out, "no such directory")
	code, out, _ = ctl("status", "--json", "--dir", dir)
	assert.Equal(t, exitNotRunning, code, out)
	assert.Contains(t, out, "no such directory", "--json says so too, among the warnings")

	code, out, _ = ctl("status", "--dir", testharness.TempDir(t))
	assert.Equal(t, exitNotRunning, code, out)
	assert.NotContains(t, out, "no such directory", "an empty directory is only not running")
}

// Case: --timeout 0 is no limit for wait, as for start; a negative one is a
// usage error for both, where it would give up at once.
func TestTimeoutZeroIsNoLimitAndNegativeIsRefused(t *testing.T) {
	dir := testharness.TempDir(t)
	code, out, errOut := ctl("wait", "--timeout", "0", "--dir", dir)
	assert.Equal(t, exitOK, code, "no runner: done at once\n%s%s", out, errOut)
	for _, cmd := range [][]string{{"wait", "--timeout", "-1s", "--dir", dir}, {"start", "--timeout", "-1s", "--dir", dir, "--", "true"}} {
		code, _, errOut = ctl(cmd...)
		assert.Equal(t, exitUsage, code, "%v", cmd)
		assert.Contains(t, errOut, "--timeout -1s is negative", "%v", cmd)
	}
}

// Case: stop asks the server to go and waits until it has let the directory
// go; it exits 75 when the timeout ends first, and 0 at once when nothing
// holds the directory.
func TestStopWaitsForTheServerToLetGo(t *testing.T) {
	dir := testharness.TempDir(t)
	code, out, _ := ctl("stop", "--dir", dir)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "nothing to stop")
	code, out, _ = ctl("stop", "--dir", filepath.Join(dir, "typo"))
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "no such directory: is --dir mistyped?")

	release, err := runnerstate.Acquire(dir)
	require.NoError(t, err)
	defer release()
	code, out, errOut := ctl("stop", "--now", "--timeout", "50ms", "--dir", dir)
	assert.Equal(t, exitBusy, code, "%s%s", out, errOut)
	assert.Contains(t, errOut, "has not let the directory go")
	mode, _ := runnerstate.RestartRequested(dir)
	assert.Equal(t, runnerstate.RestartNow, mode, "asked")

	// A holder that goes when asked (the request above withdrawn first).
	require.NoError(t, runnerstate.ClearRestart(dir))
	ctx, cancel := context.WithCancel(context.Background())
	restarts := runnerstate.WatchRestart(ctx, dir)
	testharness.EndWatch(t, cancel, restarts)
	go func() {
		<-restarts
		release()
	}()
	code, out, errOut = ctl("stop", "--dir", dir)
	assert.Equal(t, exitOK, code, "%s%s", out, errOut)
	assert.Contains(t, out, "has let "+dir+" go")
	code, _, errOut = ctl("stop", "--drain", "--now", "--dir", dir)
	assert.Equal(t, exitUsage, code, errOut)
}
