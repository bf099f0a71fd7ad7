//go:build linux

package runnerstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"golang.org/x/sys/unix"
)

// The roles only Linux tests start (chaos_test.go, crash_test.go,
// hostile_test.go), listed with the others in roles_test.go's table; they
// need /proc, mounts and the chaos and crash tests' own settings.

// chaos-starter: Takeover dir once (options: Grace and KillAfter 150 ms,
// context 5 s) and, when admitted, run a job for $JOB, ticking into the
// witness log every 3 ms; with $RUNNERSTATE_TEST_WORKER set, the job also
// has a worker process in the runner's tree (chaos-worker). Behaviour
// (RUNNERSTATE_TEST_BEHAVIOUR): "obey" ends its job on a restart request,
// RestartLost or SIGTERM; "stubborn" ignores restart requests and
// RestartLost; "deaf" ignores them and SIGTERM, and has to be killed.
// Closing stdin ends the job, or the wait, at once. It says "admitted" when
// it is the runner; anything else it says is an error.
func roleChaosStarter(dir string) int {
	// Errors only: with a dozen processes taking over from each other,
	// the warnings about unverifiable holders (a runner between taking
	// the lock and writing its identity) would drown the test log.
	SetLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	w, err := os.OpenFile(os.Getenv(envWitness), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		say("error %v", err)
		return 1
	}
	behaviour := os.Getenv(envBehaviour)
	job, _ := time.ParseDuration(os.Getenv(envJob))
	lockPath := filepath.Join(dir, LockName)
	terms := make(chan os.Signal, 8)
	signal.Notify(terms, syscall.SIGTERM)
	stdinClosed := make(chan struct{})
	go func() {
		for range commands() {
		}
		close(stdinClosed)
	}()
	treePath := filepath.Join(dir, treeLockName)
	defer liveness.SetSignalHook(func(pid int, sig syscall.Signal) {
		// The target is pinned and was verified just before this hook:
		// its pid still names it. It holds the directory when it holds
		// runner.lock, or only tree.lock (a runner whose runner.lock was
		// lost, or an orphan).
		witnessLine(w, "signal", procKey(pid), int(sig), holdsFlock(pid, lockPath) || holdsFlock(pid, treePath))
	})()

	// The starter's own registration in the gate, for the superseded
	// check: seen by polling while Takeover waits.
	self := Self()
	mySeq := make(chan uint64, 1)
	ctx, cancel := context.WithTimeout(context.Background(), chaosWait)
	defer cancel()
	waitDone := make(chan struct{})
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			g, _ := readGate(dir)
			for _, e := range g.Waiting {
				if e.Starter.Instance == self.Instance {
					mySeq <- e.Seq
					return
				}
			}
			select {
			case <-waitDone:
				return
			case <-t.C:
			}
		}
	}()
	go func() {
		select {
		case sig := <-terms:
			// Admitted already (Takeover returns after it publishes and
			// the previous runner exits): then it is the runner's.
			if holdsFlock(os.Getpid(), lockPath) {
				terms <- sig
				return
			}
			witnessLine(w, "term-waiting")
			cancel()
		case <-stdinClosed:
			cancel()
		case <-waitDone:
		}
	}()
	// A watchdog: a Takeover that outlives its context by far is a hang;
	// say so with every goroutine's stack.
	watchdog := time.AfterFunc(chaosWait+15*time.Second, func() {
		witnessLine(w, "hung", "watchdog")
		buf := make([]byte, 1<<20)
		os.Stderr.Write(buf[:runtime.Stack(buf, true)])
		os.Exit(3)
	})
	witnessLine(w, "call", behaviour)
	start := time.Now()
	release, err := Takeover(ctx, dir, TakeoverOptions{Grace: chaosGrace, KillAfter: chaosKillAfter})
	took := time.Since(start)
	watchdog.Stop()
	close(waitDone)
	if took > chaosWait+5*time.Second {
		witnessLine(w, "hung", took)
	}
	seq := uint64(0)
	select {
	case seq = <-mySeq:
	default:
	}
	switch {
	case errors.Is(err, ErrSuperseded):
		g, _ := readGate(dir)
		witnessLine(w, "superseded", seq, g.Seq)
		return 0
	case errors.Is(err, ErrBusy):
		witnessLine(w, "busy", strings.ReplaceAll(err.Error(), " ", "_"))
		return 0
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Documented as a *BusyError wrapping the context's error; see
		// TestTakeoverContextEndIsBusy.
		witnessLine(w, "bare-ctx", strings.ReplaceAll(err.Error(), " ", "_"))
		return 0
	case err != nil:
		witnessLine(w, "error", strings.ReplaceAll(err.Error(), " ", "_"))
		say("error %v", err)
		return 1
	}
	// Admitted means holding runner.lock, or, when it was unlinked (the
	// killer does), still holding tree.lock, which keeps others out.
	if !holdsFlock(os.Getpid(), lockPath) && !holdsFlock(os.Getpid(), treePath) {
		holders, _ := kernelFlockHolders(lockPath)
		witnessLine(w, "nothold", fmt.Sprint(holders))
	}
	g, _ := readGate(dir)
	witnessLine(w, "start", g.Admitted, self.Instance)
	say("admitted")

	jobCtx, cancelJob := context.WithCancel(context.Background())
	defer cancelJob()
	restarts := WatchRestart(jobCtx, dir)
	worker := startChaosWorker(dir)
	tick := time.NewTicker(chaosTick)
	defer tick.Stop()
	done := time.After(job)
	reason := ""
	for reason == "" {
		select {
		case <-tick.C:
			witnessLine(w, "tick")
		case <-done:
			reason = "job-done"
		case <-stdinClosed:
			reason = "stop"
		case mode := <-restarts:
			switch {
			case mode == RestartLost && behaviour == "obey":
				reason = "lost"
			case behaviour == "obey":
				reason = "restart"
			}
		case <-terms:
			if behaviour != "deaf" {
				reason = "term"
			}
		}
	}
	// A good runner stops its worker before it lets go; one killed
	// before it could leaves the worker an orphan.
	stopChaosWorker(worker)
	witnessLine(w, "end", reason)
	release()
	cancelJob()
	for range restarts {
	}
	return 0
}

// crash-writer: take dir over, say "ready", then for gen = $GEN, $GEN+1,
// ...: on every fifth gen, release and take dir over again; Publish a
// record whose meta is {"gen": gen}; leave a restart
// request (cleared and re-made as drain on even gens, upgraded to now on
// odd ones); replace the state file with crashLines lines "gen <gen>
// <i>"; append "line <gen>" to the journal; say "ack <gen>". It runs
// until it is killed.
func roleCrashWriter(dir string) int {
	gen, err := strconv.Atoi(os.Getenv(envCrashGen))
	if err != nil {
		say("error %v", err)
		return 1
	}
	quietChild()
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	defer cancel()
	release, err := Takeover(ctx, dir, TakeoverOptions{})
	if err != nil {
		say("error %v", err)
		return 1
	}
	say("ready")
	lines := make([]string, crashLines)
	for ; ; gen++ {
		if gen%5 == 4 {
			// Let go and take the directory again now and then, so that
			// kills land in release and in admission too.
			release()
			if release, err = Takeover(ctx, dir, TakeoverOptions{}); err != nil {
				say("error retake %v", err)
				return 1
			}
		}
		meta, _ := json.Marshal(map[string]int{crashMetaKey: gen})
		if err := Publish(dir, Record{Meta: meta}); err != nil {
			say("error publish %v", err)
			return 1
		}
		if gen%2 == 0 {
			if err := ClearRestart(dir); err != nil {
				say("error clear %v", err)
				return 1
			}
			err = RequestRestart(dir, RestartDrain)
		} else {
			err = RequestRestart(dir, RestartNow)
		}
		if err != nil {
			say("error request %v", err)
			return 1
		}
		for i := range lines {
			lines[i] = fmt.Sprintf("gen %d %d %s", gen, i, strings.Repeat("x", 64))
		}
		if err := SaveLines(dir, crashState, lines); err != nil {
			say("error save %v", err)
			return 1
		}
		if err := AppendLine(dir, crashJournal, fmt.Sprintf("line %d", gen)); err != nil {
			say("error append %v", err)
			return 1
		}
		say("ack %d", gen)
	}
}

// ops: run the operations listed in RUNNERSTATE_TEST_OPS against dir, one
// after another, and say "op <json opResult>" for each. With
// RUNNERSTATE_TEST_MOUNT_RO=1 it first bind-mounts dir read-only onto
// itself (it must run in a mount namespace of its own) and says
// "mounted" or "nomount <why>". The operation "rhold" takes a shared
// lock on runner.lock and holds it until stdin closes.
func roleOps(dir string) int {
	if os.Getenv(envMountRO) == "1" {
		if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
			say("nomount %v", err)
			return 0
		}
		if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			say("nomount %v", err)
			return 0
		}
		say("mounted")
	}
	for _, op := range strings.Split(os.Getenv(envOps), ",") {
		r := opResult{Op: op}
		var err error
		switch op {
		case "status":
			var st Report
			st, err = Status(dir)
			r.Held = st.Held
			r.Extra = strings.Join(st.Warnings, "; ")
		case "running":
			_, r.Held, err = Running(dir)
		case "acquire":
			var release func()
			if release, err = Acquire(dir); err == nil {
				release()
			}
		case "takeover":
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var release func()
			if release, err = Takeover(ctx, dir, TakeoverOptions{}); err == nil {
				release()
			}
			cancel()
		case "trylock":
			var unlock func()
			if unlock, err = TryLock(filepath.Join(dir, LockName)); err == nil {
				unlock()
			}
		case "request":
			err = RequestRestart(dir, RestartNow)
		case "save":
			err = SaveLines(dir, "state", []string{"x"})
		case "append":
			err = AppendLine(dir, "state", "x")
		case "load":
			var lines []string
			lines, err = LoadLines(dir, "state")
			r.Extra = strings.Join(lines, "|")
		case "clearstale":
			_, _, err = ClearStale(dir)
		case "rhold":
			unlock, err := TryRLock(filepath.Join(dir, LockName))
			if err != nil {
				say("error %v", err)
				return 1
			}
			say("held")
			return holdUntilClosed(unlock)
		default:
			say("error unknown op %q", op)
			return 2
		}
		if err != nil {
			r.Err = err.Error()
			r.Busy = errors.Is(err, ErrBusy)
			r.Perm = errors.Is(err, os.ErrPermission)
			r.ROFS = errors.Is(err, syscall.EROFS)
		}
		data, _ := json.Marshal(r)
		say("op %s", data)
	}
	return 0
}

// tree-runner: Takeover dir and Publish, then start three children and say
// each one's pid: "child <pid>", a sleep that Inherits the tree lock
// (trapping SIGTERM when $RUNNERSTATE_TEST_BEHAVIOUR is "stubborn"), "plain
// <pid>", a sleep started without Inherit, and "opener <pid>", a sleep given
// tree.lock opened on a descriptor of its own (open, but not locked). Then
// "ready". Command "release" releases the directory ("released"); it runs
// until stdin closes. The children are the test's to kill.
func roleTreeRunner(dir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	defer cancel()
	release, err := Takeover(ctx, dir, TakeoverOptions{})
	if err != nil {
		say("error %v", err)
		return 1
	}
	if err := Publish(dir, Record{Specs: []string{"tree"}}); err != nil {
		say("error %v", err)
		return 1
	}
	script := "exec sleep 600"
	if os.Getenv(envBehaviour) == "stubborn" {
		script = "trap '' TERM; exec sleep 600"
	}
	inherited := exec.Command("sh", "-c", script)
	if err := Inherit(dir, inherited); err != nil {
		say("error %v", err)
		return 1
	}
	plain := exec.Command("sleep", "600")
	opened, err := os.Open(filepath.Join(dir, treeLockName))
	if err != nil {
		say("error %v", err)
		return 1
	}
	opener := exec.Command("sleep", "600")
	opener.ExtraFiles = []*os.File{opened}
	for _, c := range []struct {
		name string
		cmd  *exec.Cmd
	}{{"child", inherited}, {"plain", plain}, {"opener", opener}} {
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // outside the test's process group
		if err := c.cmd.Start(); err != nil {
			say("error %v", err)
			return 1
		}
		say("%s %d", c.name, c.cmd.Process.Pid)
	}
	opened.Close()
	say("ready")
	for cmd := range commands() {
		if cmd == "release" {
			release()
			say("released")
		}
	}
	release()
	return 0
}

// startChaosWorker starts, when $RUNNERSTATE_TEST_WORKER is set, a
// chaos-worker that Inherits this runner's tree lock; nil otherwise.
func startChaosWorker(dir string) *exec.Cmd {
	if os.Getenv(envWorker) == "" {
		return nil
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", dir)
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"=chaos-worker", envOwner+"="+selfKey())
	if err := Inherit(dir, cmd); err != nil {
		return nil
	}
	if err := cmd.Start(); err != nil {
		return nil
	}
	return cmd
}

// stopChaosWorker stops a worker with SIGTERM and waits for it.
func stopChaosWorker(cmd *exec.Cmd) {
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// envOwner names, for a chaos worker, the runner whose tree it is in.
const envOwner = "RUNNERSTATE_TEST_OWNER"

// chaos-worker: a runner's worker, in its tree. It says "ostart <owner>" in
// the witness log, then "otick <owner>" every 3 ms until it is signalled;
// it reads no stdin, so a runner killed with kill -9 leaves it running, an
// orphan, as a real worker would be.
func roleChaosWorker(string) int {
	w, err := os.OpenFile(os.Getenv(envWitness), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return 1
	}
	owner := os.Getenv(envOwner)
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	witnessLine(w, "ostart", owner)
	tick := time.NewTicker(chaosTick)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			witnessLine(w, "otick", owner)
		case <-terms:
			return 0
		}
	}
}

// envWorker asks a chaos starter for a worker process in its tree.
const envWorker = "RUNNERSTATE_TEST_WORKER"

// mmap-pin: take an exclusive flock on dir's runner.lock, map the file and
// close the descriptor, so that the lock stays held by an open file that no
// descriptor names (as a /proc/<pid>/fdinfo reader holds a file the holder
// has just closed), and say "pinned"; command "unpin" unmaps it, which
// frees the lock, and says "unpinned".
func roleMmapPin(dir string) int {
	path := filepath.Join(dir, LockName)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		say("error %v", err)
		return 1
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		say("error %v", err)
		return 1
	}
	mem, err := unix.Mmap(fd, 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		say("error %v", err)
		return 1
	}
	unix.Close(fd)
	say("pinned")
	for cmd := range commands() {
		if cmd == "unpin" && mem != nil {
			unix.Munmap(mem)
			mem = nil
			say("unpinned")
		}
	}
	return 0
}
