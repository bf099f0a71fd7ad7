//go:build unix || windows

package runnerstate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// TestLastLogLineQuotesAPanic: a Go panic's goroutine trace ends the log;
// the error quotes its "panic:" line, not the trace's last frame.
func TestLastLogLineQuotesAPanic(t *testing.T) {
	trace := "starting v2\npanic: config: unknown field \"listen_adress\"\n\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:12 +0x1d\nexit status 2\n"
	assert.Equal(t, `panic: config: unknown field "listen_adress"`, lastLogLine(trace))
	assert.Equal(t, "bind: address in use", lastLogLine("panic: earlier\n\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:12 +0x1d\nrestarted\nbind: address in use\n"))
	assert.Equal(t, "listening", lastLogLine("listening\n"))
}
