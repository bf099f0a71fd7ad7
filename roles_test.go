//go:build unix || windows

package runnerstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The roles that tests of several files start; a role started by one file's
// tests is registered in that file. A role reports events on stdout, one
// line each (say), and takes commands on stdin, one per line (commands);
// closing its stdin tells it to let go and exit.
func init() {
	registerRole("hold", roleHold)
	registerRole("rhold", roleRhold)
	registerRole("acquire", roleAcquire)
	registerRole("idle", roleIdle)
	registerRole("append", roleAppend)
	registerRole("runner", roleRunner)
	registerRole("starter", roleStarter)
	registerRole("scope", roleScope)
	registerRole("sync", roleSync)
	registerRole("reset", roleReset)
	registerRole("request", roleRequest)
}

// hold: take an exclusive lock on the path, say "locked", hold it until
// stdin closes. Command "read" reads the lock file with os.ReadFile in this
// same process (the fcntl-lock pitfall) and says "read".
func roleHold(path string) int {
	unlock, err := TryLock(path)
	if err != nil {
		say("error %v", err)
		return 1
	}
	say("locked")
	for cmd := range commands() {
		if cmd == "read" {
			os.ReadFile(path)
			say("read")
		}
	}
	unlock()
	return 0
}

// holdUntilClosed holds what release lets go until stdin closes (the test
// is done with the role), then lets it go: the role exits 0.
func holdUntilClosed(release func()) int {
	for range commands() {
	}
	release()
	return 0
}

// rhold: a shared lock, held until stdin closes.
func roleRhold(path string) int {
	unlock, err := TryRLock(path)
	if err != nil {
		say("error %v", err)
		return 1
	}
	say("locked")
	return holdUntilClosed(unlock)
}

// acquire: Acquire and Publish dir, say "acquired", hold until stdin
// closes. Commands: "spawn" starts a long-lived child (this binary in the
// "idle" role, a plain exec.Command that inherits nothing on purpose) and
// says "spawned <pid>"; "read" reads runner.lock with os.ReadFile in this
// process and says "read", or "read <err>" where a held lock file cannot
// be read (Windows).
func roleAcquire(dir string) int {
	release, ok := acquirePublished(dir, Record{MaxParallel: 2, Specs: []string{"demo"}})
	if !ok {
		return 1
	}
	say("acquired")
	for cmd := range commands() {
		switch cmd {
		case "spawn":
			c := testharness.Command("")
			c.Env = append(os.Environ(), testharness.RoleEnv+"=idle")
			if err := c.Start(); err != nil {
				say("error %v", err)
				return 1
			}
			say("spawned %d", c.Process.Pid)
		case "read":
			if _, err := os.ReadFile(filepath.Join(dir, LockName)); err != nil {
				say("read %v", err)
			} else {
				say("read")
			}
		}
	}
	release()
	return 0
}

// acquirePublished is a role's Acquire of dir and Publish of rec. On an
// error it says "error <err>", lets dir go, and reports false.
func acquirePublished(dir string, rec Record) (release func(), ok bool) {
	release, err := Acquire(dir)
	if err != nil {
		say("error %v", err)
		return nil, false
	}
	if err := Publish(dir, rec); err != nil {
		say("error %v", err)
		release()
		return nil, false
	}
	return release, true
}

// idle: live for ten minutes (it is killed long before), as sleep(1) would,
// on every platform.
func roleIdle(string) int {
	time.Sleep(10 * time.Minute)
	return 0
}

// append: AppendLine "<tag> <i>" for i in 0..n-1 (n is the role's line
// count, from the environment), then say "appended".
func roleAppend(dir string) int {
	n, _ := strconv.Atoi(os.Getenv("RUNNERSTATE_TEST_N"))
	tag := os.Getenv("RUNNERSTATE_TEST_TAG")
	for i := range n {
		if err := AppendLine(dir, "log", fmt.Sprintf("%s %d", tag, i)); err != nil {
			say("error %v", err)
			return 1
		}
	}
	say("appended")
	return 0
}

// runner: Acquire and Publish dir, say "acquired". "obey" exits at once
// on any restart request. "stubborn" says "ack <mode>" for each request
// and goes on holding, and says "term" for each SIGTERM it ignores.
// "linger" releases the directory on a restart request, says "released",
// and lives on until stdin closes, as a runner finishing its exit does.
func roleRunner(dir string) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	release, ok := acquirePublished(dir, Record{Specs: []string{"old"}})
	if !ok {
		return 1
	}
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restarts := WatchRestart(ctx, dir)
	say("acquired")
	cmds := commands()
	for {
		select {
		case mode := <-restarts:
			switch os.Getenv(envBehaviour) {
			case "obey":
				say("exiting %s", mode)
				return 0
			case "linger":
				release()
				say("released")
				for range cmds {
				}
				return 0
			}
			say("ack %s", mode)
		case <-sigs:
			if os.Getenv(envBehaviour) == "obey" {
				return 143
			}
			say("term")
		case _, ok := <-cmds:
			if !ok {
				return 0
			}
		}
	}
}

// starter: Takeover with the options and timeout from the environment;
// says "admitted" (and holds until stdin closes), "superseded", "busy
// <err>" or "error <err>". Every signal it sends is said first as
// "signal <number>".
func roleStarter(dir string) int {
	var opts TakeoverOptions
	if s := os.Getenv(envOptions); s != "" {
		if err := json.Unmarshal([]byte(s), &opts); err != nil {
			say("error %v", err)
			return 1
		}
	}
	wait, _ := time.ParseDuration(os.Getenv(envWait))
	if wait == 0 {
		wait = childWait
	}
	var mu sync.Mutex
	defer liveness.SetSignalHook(func(pid int, sig syscall.Signal) {
		mu.Lock()
		defer mu.Unlock()
		say("signal %d %d", pid, int(sig))
	})()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	release, err := Takeover(ctx, dir, opts)
	switch {
	case errors.Is(err, ErrSuperseded):
		say("superseded")
		return 0
	case errors.Is(err, ErrBusy):
		say("busy %v", err)
		return 0
	case err != nil:
		say("error %v", err)
		return 1
	}
	say("admitted")
	return holdUntilClosed(release)
}

// scope: a would-be server of the scope and data dir in arg
// ("<scope>\n<data>"). Commands: "acquire <ms>" calls AcquireScope with a
// deadline of ms milliseconds (0: no deadline) and says "held", "busy
// <scopeBusy JSON>" or "error <err>"; "release" releases and says
// "released". At EOF it releases what it holds and exits.
func roleScope(arg string) int {
	scopeDir, dataDir, _ := strings.Cut(arg, "\n")
	var release func()
	for cmd := range commands() {
		switch {
		case strings.HasPrefix(cmd, "acquire "):
			ms, _ := strconv.Atoi(strings.TrimPrefix(cmd, "acquire "))
			start := time.Now() // before the deadline is set, so it cannot count from later
			ctx, cancel := context.WithCancel(context.Background())
			if ms > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), time.Duration(ms)*time.Millisecond)
			}
			r, err := AcquireScope(ctx, scopeDir, dataDir)
			took := time.Since(start)
			cancel()
			var be *BusyError
			switch {
			case err == nil:
				release = r
				say("held")
			case errors.As(err, &be):
				line, _ := json.Marshal(scopeBusy{
					Owner: be.Owner, PID: be.PID, Verified: be.Verified, Msg: err.Error(),
					Busy: errors.Is(err, ErrBusy), Deadline: errors.Is(err, context.DeadlineExceeded),
					Millis: took.Milliseconds(),
				})
				say("busy %s", line)
			default:
				say("error %v", err)
			}
		case cmd == "release":
			if release != nil {
				release()
				release = nil
			}
			say("released")
		}
	}
	if release != nil {
		release()
	}
	return 0
}

// sync: say "starting", hold the sync mark of root from SyncRunning (no
// deadline), say "marked", hold it until stdin closes.
func roleSync(root string) int {
	say("starting")
	release, err := SyncRunning(context.Background(), root)
	if err != nil {
		say("error %v", err)
		return 1
	}
	say("marked")
	return holdUntilClosed(release)
}

// reset: NoSyncRunning on root; say "reset" and hold the mark until stdin
// closes, or say why it was refused: "syncrunning <msg>", "unknown <msg>"
// or "error <msg>".
func roleReset(root string) int {
	release, err := NoSyncRunning(root)
	switch {
	case err == nil:
		say("reset")
		for range commands() {
		}
		release()
	case errors.Is(err, ErrSyncRunning):
		say("syncrunning %v", err)
	case errors.Is(err, ErrSyncUnknown):
		say("unknown %v", err)
	default:
		say("error %v", err)
	}
	return 0
}

// request: RequestRestart dir with the mode in $RUNNERSTATE_TEST_BEHAVIOUR,
// say "requested", and exit.
func roleRequest(dir string) int {
	if err := RequestRestart(dir, os.Getenv(envBehaviour)); err != nil {
		say("error %v", err)
		return 1
	}
	say("requested")
	return 0
}

// TestEveryRoleIsStarted: every registered role is started by some test: its
// name is an argument of a call in a test file (startChild(t, "hold", …), a
// helper that starts it), or the end of a "<RoleEnv>=<name>" setting, other
// than its own registration. A role no test starts is dead code that
// registration would otherwise keep compiling.
func TestEveryRoleIsStarted(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	started := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "registerRole" {
				return false
			}
			for _, arg := range call.Args {
				ast.Inspect(arg, func(n ast.Node) bool {
					if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil {
							started[s] = true
							if _, after, ok := strings.Cut(s, "="); ok {
								started[after] = true
							}
						}
					}
					return true
				})
			}
			return true
		})
	}
	require.NotEmpty(t, roles)
	for name := range roles {
		assert.True(t, started[name], "role %q is registered but no test starts it", name)
	}
}

// TestRegisterRoleRefusesADuplicate: a second registration of a name panics,
// and leaves the first in place.
func TestRegisterRoleRefusesADuplicate(t *testing.T) {
	first := reflect.ValueOf(roles["hold"]).Pointer()
	assert.Panics(t, func() { registerRole("hold", roleAcquire) })
	assert.Equal(t, first, reflect.ValueOf(roles["hold"]).Pointer())
}
