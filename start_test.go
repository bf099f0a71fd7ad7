//go:build unix || windows

package runnerstate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Start's portable test, which runs on Windows (under Wine in CI) too: the
// rest of its tests, which use Unix signals, sessions and /proc, are in
// start_linux_test.go.

func init() { registerRole("portable-runner", rolePortableRunner) }

// portable-runner: with RUNNERSTATE_TEST_PORTABLE_DIE set, print "boom" and exit 3;
// otherwise Takeover dir, Publish, and hold it until the file "stop"
// appears in dir.
func rolePortableRunner(dir string) int {
	if os.Getenv("RUNNERSTATE_TEST_PORTABLE_DIE") != "" {
		fmt.Fprintln(os.Stderr, "boom")
		return 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	defer cancel()
	release, err := Takeover(ctx, dir, TakeoverOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "takeover:", err)
		return 1
	}
	defer release()
	if err := Publish(dir, Record{Specs: []string{"portable"}}); err != nil {
		fmt.Fprintln(os.Stderr, "publish:", err)
		return 1
	}
	for ctx.Err() == nil {
		if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
			return 0
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 1
}

// reaped reports whether every process this process started in dir has
// been reaped.
func reaped(dir string) bool {
	abs, _ := filepath.Abs(dir)
	return allReaped(abs)
}

// Start starts a runner detached, returns its ready record, and reaps it
// once it exits; one that dies first is a *StartError with its status and
// output.
func TestStartPortable(t *testing.T) {
	captureLog(t)
	dir := tempDir(t)
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"=portable-runner")
	rec, err := Start(background(t), dir, cmd, StartOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644)
		eventually(t, "the runner is reaped", func() bool { return reaped(dir) })
	})
	assert.True(t, rec.Ready)
	assert.Equal(t, []string{"portable"}, rec.Specs)
	assert.Equal(t, cmd.Process.Pid, rec.PID)
	r, err := Status(dir)
	require.NoError(t, err)
	assert.True(t, r.Holder.Ready)
	assert.Zero(t, r.Starting)

	again, err := Start(background(t), dir, testharness.Command(dir), StartOptions{})
	require.NoError(t, err)
	assert.Equal(t, rec.PID, again.PID, "the fast path")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644))
	eventually(t, "the runner is reaped", func() bool { return reaped(dir) })
	_, ok, err := Running(dir)
	require.NoError(t, err)
	assert.False(t, ok)

	die := testharness.Command(dir)
	die.Env = append(os.Environ(), testharness.RoleEnv+"=portable-runner", "RUNNERSTATE_TEST_PORTABLE_DIE=1")
	_, err = Start(background(t), dir, die, StartOptions{})
	var se *StartError
	require.True(t, errors.As(err, &se), "%v", err)
	assert.Equal(t, 3, se.ExitCode)
	assert.Contains(t, se.LogTail, "boom")
}

// The bound on an unreadable record: only one that stays so under the same
// verified holder for recordUnreadableFor fails a Start; a momentary
// unreadable read (a file being replaced), a readable or absent record, or
// another holder starts the count again.
func TestUnreadableRecordBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := Identity{PID: 10, Instance: "a", StartTicks: 1}
	b := Identity{PID: 11, Instance: "b", StartTicks: 2}
	type seen struct {
		after    time.Duration
		holder   Identity
		corrupt  bool
		verified bool
	}
	for _, tc := range []struct {
		name  string
		looks []seen
		fails bool
	}{
		{"one unreadable look", []seen{{0, a, true, true}}, false},
		{"unreadable for the bound", []seen{{0, a, true, true}, {500 * time.Millisecond, a, true, true}, {recordUnreadableFor, a, true, true}}, true},
		{"unreadable, then not, then again", []seen{{0, a, true, true}, {600 * time.Millisecond, a, false, true}, {700 * time.Millisecond, a, true, true}, {recordUnreadableFor + 100*time.Millisecond, a, true, true}}, false},
		{"another holder", []seen{{0, a, true, true}, {recordUnreadableFor, b, true, true}}, false},
		{"the holder not verified", []seen{{0, a, true, false}, {recordUnreadableFor, a, true, false}, {2 * recordUnreadableFor, a, true, false}}, false},
		{"verified again after not", []seen{{0, a, true, false}, {recordUnreadableFor, a, true, true}, {2 * recordUnreadableFor, a, true, true}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u unreadableSince
			fails := false
			for _, s := range tc.looks {
				fails = u.still(s.holder, s.corrupt && s.verified, t0.Add(s.after))
			}
			assert.Equal(t, tc.fails, fails)
		})
	}
}

// The line a StartError quotes: the last non-empty line of the tail, cut
// to about 200 characters keeping its beginning and its end, printable.
func TestStartErrorLastLine(t *testing.T) {
	long := "panic: " + strings.Repeat("x", 300) + ": bind: invalid argument"
	for _, tc := range []struct{ tail, want string }{
		{"", ""},
		{"\n\n", ""},
		{"first\nlast\n", "last"},
		{"first\nlast\r\n\n  \n", "last"},
		{"no newline", "no newline"},
		{"a\x1b[31mred\n", `a\x1b[31mred`},
	} {
		assert.Equal(t, tc.want, lastLogLine(tc.tail), "%q", tc.tail)
	}
	got := lastLogLine("before\n" + long + "\n")
	assert.LessOrEqual(t, len([]rune(got)), 210)
	assert.True(t, strings.HasPrefix(got, "panic: xxx"), got)
	assert.True(t, strings.HasSuffix(got, ": bind: invalid argument"), got)
	assert.Contains(t, got, "…")
	e := &StartError{Dir: "/d", PID: 5, ExitCode: 1, Log: "/d/runner.log", LogTail: "x\n" + long}
	assert.Contains(t, e.Error(), ": bind: invalid argument")
	assert.LessOrEqual(t, len(e.Error()), 400)
}

// TestLastLogLineQuotesAPanic: a Go panic's goroutine trace ends the log;
// the error quotes its "panic:" line, not the trace's last frame.
func TestLastLogLineQuotesAPanic(t *testing.T) {
	trace := "starting v2\npanic: config: unknown field \"listen_adress\"\n\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:12 +0x1d\nexit status 2\n"
	assert.Equal(t, `panic: config: unknown field "listen_adress"`, lastLogLine(trace))
	assert.Equal(t, "bind: address in use", lastLogLine("panic: earlier\n\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:12 +0x1d\nrestarted\nbind: address in use\n"))
	assert.Equal(t, "listening", lastLogLine("listening\n"))
}
