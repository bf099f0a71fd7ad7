//go:build unix || windows

package runnerstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
)

// The roles of the multi-process tests, in one place: a test starts one with
// startChild(t, name, arg); the child runs it with arg and exits with its
// code. A role reports events on stdout, one line each (say), and takes
// commands on stdin, one per line (commands); closing its stdin tells it to
// let go and exit.
var roles = testharness.Roles{
	"hold":          roleHold,
	"wait":          roleWait,
	"try":           roleTry,
	"rhold":         roleRhold,
	"acquire":       roleAcquire,
	"idle":          roleIdle,
	"try-acquire":   roleTryAcquire,
	"acquire-loop":  roleAcquireLoop,
	"append":        roleAppend,
	"runner":        roleRunner,
	"starter":       roleStarter,
	"scope":         roleScope,
	"scope-raw":     roleScopeRaw,
	"sync":          roleSync,
	"reset":         roleReset,
	"chaos-starter": roleChaosStarter,
	"bare-holder":   roleBareHolder,
	"crash-writer":  roleCrashWriter,
	"ops":           roleOps,
	"ns-runner":     roleNsRunner,
	"observe":       roleObserve,
	"probe-loop":    roleProbeLoop,
	"acquire-log":   roleAcquireLog,
	"tree-runner":   roleTreeRunner,
	"lost-runner":   roleLostRunner,
	"request":       roleRequest,
	"chaos-worker":  roleChaosWorker,
	"mmap-pin":      roleMmapPin,
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

// wait: block in Lock until it is ours, say "locked", hold until stdin
// closes.
func roleWait(path string) int {
	say("waiting")
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		say("error %v", err)
		return 1
	}
	say("locked")
	return holdUntilClosed(unlock)
}

// try: one TryLock; say "locked" or "busy <pid>".
func roleTry(path string) int {
	unlock, err := TryLock(path)
	if err != nil {
		var be *BusyError
		if errors.As(err, &be) {
			say("busy %d", be.PID)
			return 0
		}
		say("error %v", err)
		return 1
	}
	unlock()
	say("locked")
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
	release, err := Acquire(dir)
	if err != nil {
		say("error %v", err)
		return 1
	}
	if err := Publish(dir, Record{MaxParallel: 2, Specs: []string{"demo"}}); err != nil {
		say("error %v", err)
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

// idle: live for ten minutes (it is killed long before), as sleep(1) would,
// on every platform.
func roleIdle(string) int {
	time.Sleep(10 * time.Minute)
	return 0
}

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
	release, err := Acquire(dir)
	if err != nil {
		say("error %v", err)
		return 1
	}
	defer release()
	if err := Publish(dir, Record{Specs: []string{"old"}}); err != nil {
		say("error %v", err)
		return 1
	}
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

// bare-holder: take an exclusive flock on runner.lock in dir and write
// this process's identity into it, as a runner does, and say "locked".
// "unlock" drops the lock (the process lives on) and says "unlocked";
// each SIGTERM is said as "term". It exits when stdin closes.
func roleBareHolder(dir string) int {
	terms := make(chan os.Signal, 4)
	signal.Notify(terms, syscall.SIGTERM)
	l, err := filelock.TryLock(filepath.Join(dir, LockName), filelock.Exclusive, 0o600)
	if err != nil {
		say("error %v", err)
		return 1
	}
	line, _ := jsonLine(Self())
	if err := l.WriteContent(line); err != nil {
		say("error %v", err)
		return 1
	}
	say("locked")
	cmds := commands()
	for {
		select {
		case cmd, ok := <-cmds:
			if !ok {
				return 0
			}
			if cmd == "unlock" {
				l.Release()
				say("unlocked")
			}
		case <-terms:
			say("term")
		}
	}
}

// ns-runner: Acquire dir, Publish, leave a restart request addressed to
// itself, say "acquired <pid as it sees itself>", hold until stdin closes.
// Run behind `unshare --pid` it is a runner of another PID namespace.
func roleNsRunner(dir string) int {
	release, err := Acquire(dir)
	if err != nil {
		say("error %v", err)
		return 1
	}
	if err := Publish(dir, Record{Specs: []string{"other-namespace"}}); err != nil {
		say("error %v", err)
		return 1
	}
	if err := RequestRestart(dir, RestartDrain); err != nil {
		say("error %v", err)
		return 1
	}
	say("acquired %d", os.Getpid())
	return holdUntilClosed(release)
}

// observe: answer questions about dir, one per command, each as one line
// "answer <JSON>": "status" (Status), "running" (Running), "standby <d>"
// (Standby with a context of d), "restart <mode>" (RequestRestart), "lock"
// (a TryLock of dir's runner.lock). It runs until stdin closes.
func roleObserve(dir string) int {
	for cmd := range commands() {
		var a observation
		switch verb, arg, _ := strings.Cut(cmd, " "); verb {
		case "status":
			r, err := Status(dir)
			a.Report, a.Err = &r, errText(err)
		case "running":
			rec, ok, err := Running(dir)
			a.Record, a.Running, a.Err = &rec, ok, errText(err)
		case "standby":
			d, _ := time.ParseDuration(arg)
			ctx, cancel := context.WithTimeout(context.Background(), d)
			res, err := Standby(ctx, dir, StandbyOptions{})
			cancel()
			a.Standby, a.Err, a.Busy = &res, errText(err), errors.Is(err, ErrBusy)
		case "restart":
			a.Err = errText(RequestRestart(dir, arg))
		case "lock":
			unlock, err := TryLock(filepath.Join(dir, LockName))
			if err == nil {
				unlock()
			}
			a.Err, a.Busy = errText(err), errors.Is(err, ErrBusy)
		}
		line, _ := json.Marshal(a)
		say("answer %s", line)
	}
	return 0
}

// observation is one answer of the observe role.
type observation struct {
	Report  *Report        `json:"report,omitempty"`
	Record  *Record        `json:"record,omitempty"`
	Running bool           `json:"running,omitempty"`
	Standby *StandbyResult `json:"standby,omitempty"`
	Busy    bool           `json:"busy,omitempty"`
	Err     string         `json:"err,omitempty"`
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// probe-loop: call Status on dir as fast as it can, say "probing" after the
// first call and "probed <n> <errors>" once stdin closes.
func roleProbeLoop(dir string) int {
	stop := make(chan struct{})
	go func() {
		for range commands() {
		}
		close(stop)
	}()
	n, failed := 0, 0
	for {
		if _, err := Status(dir); err != nil {
			failed++
		}
		if n++; n == 1 {
			say("probing")
		}
		select {
		case <-stop:
			say("probed %d %d", n, failed)
			return 0
		default:
		}
	}
}

// acquire-log: Acquire dir with the package's log captured, say "acquired
// <log as JSON string>", hold until stdin closes.
func roleAcquireLog(dir string) int {
	var log testharness.LogBuffer
	SetLogger(slog.New(slog.NewTextHandler(&log, nil)))
	release, err := Acquire(dir)
	if err != nil {
		say("error %v", err)
		return 1
	}
	line, _ := json.Marshal(log.String())
	say("acquired %s", line)
	return holdUntilClosed(release)
}

// lost-runner: Acquire dir, Publish, watch for restart requests, say
// "acquired". Each delivery is said as "got <mode>". Commands: "publish"
// (says "publish <error or ok>"), "watch" (a second WatchRestart, whose first
// delivery is said as "watch2 <mode>"). It runs until stdin closes.
func roleLostRunner(dir string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var early <-chan string
	if os.Getenv(envBehaviour) == "watch-first" {
		early = WatchRestart(ctx, dir) // before the hold exists
	}
	release, err := Acquire(dir)
	if err != nil {
		say("error %v", err)
		return 1
	}
	defer release()
	if err := Publish(dir, Record{Specs: []string{"lost"}}); err != nil {
		say("error %v", err)
		return 1
	}
	restarts := WatchRestart(ctx, dir)
	if early != nil {
		restarts = early
	}
	say("acquired")
	cmds := commands()
	var second <-chan string
	for {
		select {
		case mode := <-restarts:
			say("got %s", mode)
		case mode := <-second:
			say("watch2 %s", mode)
			second = nil
		case cmd, ok := <-cmds:
			switch {
			case !ok:
				return 0
			case cmd == "publish":
				say("publish %s", strings.ReplaceAll(errText(Publish(dir, Record{})), "\n", " "))
			case cmd == "watch":
				second = WatchRestart(ctx, dir)
			}
		}
	}
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
