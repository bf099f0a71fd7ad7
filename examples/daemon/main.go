// Command daemon is one binary that is both a client and its server, as
// Bazel, gpg-agent and tmux are, built on runnerstate's package daemon:
//
//	daemon ping    connect to the server (daemon.Dial), starting "daemon serve"
//	               when none is ready or the one that runs is an older build
//	daemon serve   take the server's directory over (daemon.Listen), answer on
//	               its socket, and run the runner
//	daemon add N   add N to the total in the foreground, borrowing the runner role
//
// The server holds two directories under --dir (default
// $XDG_RUNTIME_DIR/runnerstate-daemon, else $TMPDIR/runnerstate-daemon-<uid>): stack/, the server's, and runner/, the
// runner role, which its runner holds while no foreground command borrows
// it. A second serve (a new build, say) takes the stack over: the first
// hands its listening socket over at once and lingers on the connections
// it holds (daemon.Options.Linger) while the second accepts, and no ping
// is refused meanwhile. "add" takes the runner role with Takeover and NoSignal: the
// server's runner is asked (a restart request), never signalled, lets the
// role go and stands by (Standby) until the foreground work is done, then
// takes it back. The server's output goes to stack/runner.log.
//
// ping prints the server's pid on its last line and exits 0 after a round
// trip; 1 when the server could not be started (printing its log tail) or
// did not answer; 2 for a usage error. serve exits 0 when asked to stop
// (SIGTERM, SIGINT, or runnerctl stop --dir DIR/stack) or when a newer
// server took over, and 75 when it stepped aside for a newer one.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/daemon"
	"github.com/runnerstate/runnerstate/examples/internal/demodir"
)

const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const usage = `usage: daemon <command> [--dir DIR]

commands:
  ping     start the server when none is ready, and ask it how it is
  serve    be the server (ping starts it detached)
  add N    add N to the total in the foreground, borrowing the runner role

every command takes --dir DIR (default $XDG_RUNTIME_DIR/runnerstate-daemon, else
$TMPDIR/runnerstate-daemon-<uid>).
exit codes: 0 done; 1 the server could not be started or did not answer
(ping prints its log tail), or another error; 2 usage.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stderr
		if len(args) > 0 {
			w = stdout
		}
		fmt.Fprint(w, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	name, args := args[0], args[1:]
	fs := flag.NewFlagSet("daemon "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", demodir.Dir("runnerstate-daemon"), "the daemon's directory")
	wait := fs.Duration("timeout", time.Minute, "how long ping waits for the server to be ready, and add for the runner role")
	// Flags may come before or after the command's argument (add N), and
	// N may be negative (add -3 is a number, not a flag).
	var rest []string
	for {
		if len(args) > 0 && isNumber(args[0]) {
			rest, args = append(rest, args[0]), args[1:]
			continue
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		if fs.NArg() == 0 {
			break
		}
		rest, args = append(rest, fs.Arg(0)), fs.Args()[1:]
	}
	d := app{stack: filepath.Join(*dir, "stack"), role: filepath.Join(*dir, "runner"), wait: *wait, stdout: stdout, stderr: stderr}
	switch {
	case name == "ping" && len(rest) == 0:
		return d.ping()
	case name == "serve" && len(rest) == 0:
		return d.serve()
	case name == "add" && len(rest) == 1:
		n, err := strconv.Atoi(rest[0])
		if err != nil {
			fmt.Fprintf(stderr, "daemon add: %q is not a whole number\n", rest[0])
			return exitUsage
		}
		return d.add(n)
	case name == "add" && len(rest) == 0:
		fmt.Fprintln(stderr, "daemon add: say how much to add: daemon add N (a whole number, which may be negative)")
		return exitUsage
	}
	fmt.Fprint(stderr, usage)
	return exitUsage
}

// program and version are what the server publishes and the client
// compares: a ping of a newer build replaces an older server once.
const program = "runnerstate-daemon-example"

var version = "v1.0.0" // go build -ldflags "-X main.version=v1.1.0"

// isNumber reports whether arg is a whole number, such as -3.
func isNumber(arg string) bool {
	_, err := strconv.Atoi(arg)
	return err == nil
}

type app struct {
	stack, role    string // the server stack's directory, and the runner role's
	wait           time.Duration
	stdout, stderr io.Writer
}

// ping connects to the server, starting one when none is ready, and asks
// it how it is.
func (d app) ping() int {
	ctx, cancel := context.WithTimeout(context.Background(), d.wait)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(d.stderr, "daemon ping:", err)
		return exitError
	}
	serve := exec.Command(self, "serve", "--dir", filepath.Dir(d.stack))
	conn, rec, err := daemon.Dial(ctx, d.stack, serve, daemon.DialOptions{Program: program, Version: version})
	if err != nil {
		fmt.Fprintln(d.stderr, "daemon ping:", err)
		var se *runnerstate.StartError
		if errors.As(err, &se) && se.LogTail != "" {
			fmt.Fprintf(d.stderr, "last lines of %s:\n%s", se.Log, se.LogTail)
		}
		return exitError
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	fmt.Fprintln(conn, "ping")
	answer, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		fmt.Fprintf(d.stderr, "daemon ping: the server (pid %d) did not answer: %v\n", rec.PID, err)
		return exitError
	}
	fmt.Fprintln(d.stdout, strings.TrimSpace(answer))
	fmt.Fprintln(d.stdout, rec.PID)
	return exitOK
}

// serve takes the stack over, answers on its socket, and runs the runner
// until it is asked to go.
func (d app) serve() int {
	log := slog.New(slog.NewTextHandler(d.stderr, nil)).With("server", os.Getpid())
	runnerstate.SetLogger(log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	listenCtx, cancel := context.WithTimeout(ctx, d.wait)
	// Linger: a ping's state is its connection's own (the total is read,
	// never written, by a connection), so the old server may finish its
	// connections beside its successor while the successor accepts. Its
	// connections end within 10 s (their deadline); so does its lingering.
	srv, err := daemon.Listen(listenCtx, d.stack, daemon.Options{Program: program, Version: version,
		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "daemon.sock"}}, Logger: log,
		Linger: connDeadline})
	cancel()
	switch {
	case errors.Is(err, runnerstate.ErrSuperseded):
		log.Info("serve: a newer server came; stepping aside", "err", err)
		return runnerstate.ExitBusy
	case err != nil:
		log.Error("serve: could not listen", "err", err)
		return exitError
	}
	defer srv.Close()
	r := &runnerRole{tried: make(chan struct{}), stopped: make(chan struct{})}
	go r.run(ctx, d.role, log)
	select { // publish once the runner has its role, or knows who has it
	case <-r.tried:
	case <-ctx.Done():
	}
	go d.answer(srv.Listeners()[0], r)
	if err := srv.Ready(nil); err != nil {
		log.Error("serve: could not publish", "err", err)
		return exitError
	}
	log.Info("serve: serving", "version", version)
	select {
	case <-ctx.Done():
	case <-srv.Leaving():
		log.Info("serve: asked to go", "reason", srv.Reason(), "handed_over", isClosed(srv.Handed()), "open", srv.Open())
		// The runner role goes first: the successor's runner takes it while
		// this server finishes its connections.
		stop()
		<-r.done()
		// Every connection accepted before Leaving is this server's to
		// answer (a ping it has not read yet too), unless told to stop now:
		// Idle closes once none is open.
		if why := srv.Reason(); why != runnerstate.RestartNow && why != runnerstate.RestartLost {
			<-srv.Idle()
		}
	}
	stop()
	<-r.done()
	return exitOK
}

// answer answers each connection's lines: "ping" gets
// "pong from pid P: runner serving|standing by, total T".
func (d app) answer(ln net.Listener, r *runnerRole) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(connDeadline))
			sc := bufio.NewScanner(conn)
			for sc.Scan() {
				if sc.Text() != "ping" {
					fmt.Fprintln(conn, "unknown request")
					continue
				}
				state := "standing by"
				if r.holding.Load() {
					state = "serving"
				}
				fmt.Fprintf(conn, "pong from pid %d: runner %s, total %d\n", os.Getpid(), state, total(d.role))
			}
		}()
	}
}

// connDeadline bounds each connection the server answers.
const connDeadline = 10 * time.Second

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// runnerRole is the server's runner: it holds the runner role while no
// foreground command borrows it.
type runnerRole struct {
	holding atomic.Bool
	tried   chan struct{} // closed after its first try at the role
	stopped chan struct{}
}

func (r *runnerRole) done() <-chan struct{} { return r.stopped }

// run holds the role; when a foreground command asks for it, lets it go,
// stands by until the foreground is done, and takes it back.
func (r *runnerRole) run(ctx context.Context, dir string, log *slog.Logger) {
	defer close(r.stopped)
	first := true
	for ctx.Err() == nil {
		var release func()
		if first {
			release, _ = runnerstate.Acquire(dir) // busy: a foreground command has the role
			first = false
			close(r.tried)
		}
		if release == nil {
			if _, err := runnerstate.Standby(ctx, dir, runnerstate.StandbyOptions{Logger: log}); err != nil {
				return
			}
			var err error
			if release, err = runnerstate.Takeover(ctx, dir, runnerstate.TakeoverOptions{NoSignal: true, Logger: log}); err != nil {
				continue // a foreground command came first, or ctx ended
			}
		}
		r.holding.Store(true)
		log.Info("runner: holding the runner role", "dir", dir)
		select {
		case <-ctx.Done():
		case <-runnerstate.WatchRestart(ctx, dir):
			log.Info("runner: a foreground command asked for the runner role; standing by until it is done", "dir", dir)
		}
		r.holding.Store(false)
		release()
	}
}

// add borrows the runner role in the foreground and adds n to the total.
func (d app) add(n int) int {
	// The takeover's steps (it asks the server's runner, never signals it)
	// are the server's to log, not this command's: with no logger set, the
	// library says nothing of them.
	ctx, cancel := context.WithTimeout(context.Background(), d.wait)
	defer cancel()
	release, err := runnerstate.Takeover(ctx, d.role, runnerstate.TakeoverOptions{NoSignal: true})
	if err != nil {
		fmt.Fprintln(d.stderr, "daemon add:", err)
		return exitError
	}
	defer release()
	t := total(d.role) + n
	if err := runnerstate.SaveLines(d.role, "total", []string{strconv.Itoa(t)}); err != nil {
		fmt.Fprintln(d.stderr, "daemon add:", err)
		return exitError
	}
	fmt.Fprintf(d.stdout, "added %d in the foreground (pid %d, holding the runner role): total %d\n", n, os.Getpid(), t)
	return exitOK
}

// total is the sum the runner role keeps.
func total(dir string) int {
	lines, _ := runnerstate.LoadLines(dir, "total")
	if len(lines) == 0 {
		return 0
	}
	t, _ := strconv.Atoi(lines[0])
	return t
}
