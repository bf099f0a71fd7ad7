package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/accept"
	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// DialOptions says which server will do.
type DialOptions struct {
	// Program: a server of another program is never used nor replaced
	// (runnerstate.ErrOtherProgram). Empty: any.
	Program string
	// Version: a ready server whose Version is older than this (semver) is
	// replaced. Empty: none is.
	Version string
	// Accept, optional, is asked of a ready server that is not older than
	// Version, once per distinct record the call sees; a refusal is
	// ErrIncompatible, and nothing is replaced.
	Accept func(runnerstate.Record) bool
	// Endpoint is the index in the record's Endpoints to dial; default 0.
	Endpoint int
	// Log and Logger are runnerstate.StartOptions'.
	Log    string
	Logger *slog.Logger
	// NoBackoff is runnerstate.StartOptions': start a copy even while
	// consecutive failed starts hold every start back.
	NoBackoff bool
}

// ErrNotRunning is Dial's answer with a nil cmd when nothing holds the
// directory.
var ErrNotRunning = errors.New("daemon: no server runs in the directory")

// ErrIncompatible is Dial's answer when the ready server is not older than
// the client and Accept refuses it, or when it is older and cannot be
// replaced (a nil cmd, or a replacement that is older too).
var ErrIncompatible = errors.New("daemon: the server that runs will not do for this client")

// Dial returns a connection to the ready server of dir and its record,
// starting a copy of cmd (runnerstate.Start) when none runs or the one that
// runs is older than opts.Version.
//
// cmd is a template: Dial never starts cmd itself, and may start more than
// one copy (at most 3 that exit before they are ready, whatever holds dir),
// each with cmd's Path, Args, Env, Dir, ExtraFiles, SysProcAttr, Stdout and
// Stderr. A server a copy runs steps aside for a server of its program at
// the same or a newer version (Listen), so clients of two versions cause at
// most one replacement (older → newer), never back and forth. N concurrent
// Dials from any number of processes start one server (Start's attempt).
//
// Dial never returns a connection to a server that is not ready, nor to a
// peer that is not the server's user or root (ErrUntrustedPeer). A dial
// refused (ECONNREFUSED, ENOENT, ECONNRESET, EAGAIN) while the record shows
// the server gone, another instance, leaving or not ready is tried again
// (starting a copy of cmd when none is ready) until ctx ends; a refusal by a
// ready server that is not leaving, and any other error, is returned naming
// the endpoint (docs/operations.md). With a nil cmd, Dial waits (bounded by
// ctx) for a server not ready yet or leaving, and returns ErrNotRunning once
// nothing holds dir.
//
// Errors: ErrNotRunning; ErrIncompatible, naming both versions;
// ErrUntrustedPeer; an error naming a stopped server (SIGSTOP: Linux only);
// runnerstate.ErrOtherProgram (matching runnerstate.ErrBusy); an error naming
// the holder when its record has no Endpoints or not opts.Endpoint; a
// *runnerstate.StartError when the copy started did not become ready, or at
// once while failed starts hold every start back (RetryAt: Start's backoff);
// an error wrapping ctx.Err() naming the holder when ctx ends first.
func Dial(ctx context.Context, dir string, cmd *exec.Cmd, opts DialOptions) (net.Conn, runnerstate.Record, error) {
	if err := checkNames("Dial", dir); err != nil {
		return nil, runnerstate.Record{}, err
	}
	d := &dialing{dir: dir, cmd: cmd, opts: opts, accept: accept.Once(opts.Accept)}
	defer d.close()
	for {
		c, rec, err, again := d.once(ctx)
		if !again {
			return c, rec, err
		}
		if ended(ctx) {
			return nil, runnerstate.Record{}, d.ended(ctx, rec)
		}
	}
}

// dialing is one Dial call.
type dialing struct {
	dir      string
	cmd      *exec.Cmd
	opts     DialOptions
	accept   func(runnerstate.Record) bool // opts.Accept, asked once per distinct record
	w        *dirwatch.Watcher
	failed   int   // copies started that exited before they were ready
	replaced int   // copies started that were gone, without an exit seen, when Start looked
	last     error // the last one's *runnerstate.StartError
}

// maxStartFailures is how many copies of cmd one Dial starts, at most, that
// exit before they are ready, whatever holds dir or waits for it. Then it
// waits, bounded by its context, for a server that holds dir or is being
// admitted, and returns the last copy's *runnerstate.StartError once none
// does.
const maxStartFailures = 3

// once looks, and dials, starts or waits once; again says to look again.
func (d *dialing) once(ctx context.Context) (net.Conn, runnerstate.Record, error, bool) {
	rec, held, err := runnerstate.Running(d.dir)
	if err != nil {
		return nil, rec, err, false
	}
	if held {
		if err := otherProgram(d.dir, rec, d.opts.Program); err != nil {
			return nil, rec, err, false
		}
	}
	ready := held && rec.Usable() // a server asked to restart still serves: unlike Start, Dial uses it
	switch {
	case ready && older(rec.Version, d.opts.Version):
		if d.cmd == nil {
			return nil, rec, fmt.Errorf("%w: %s is served by %s (pid %d), older than this client's %s, and Dial was given no command to replace it", ErrIncompatible, d.dir, versionWords(rec.Version), rec.PID, d.opts.Version), false
		}
		return d.start(ctx, rec)
	case ready:
		if !d.accept(rec) {
			return nil, rec, fmt.Errorf("%w: %s is served by %s (pid %d), which this client's Accept refuses (client %s)", ErrIncompatible, d.dir, versionWords(rec.Version), rec.PID, versionWords(d.opts.Version)), false
		}
		return d.dial(ctx, rec)
	case !ready && retaking(d.dir):
		d.wait(ctx) // a lingering server takes dir back from a successor that failed
		return nil, rec, nil, true
	case d.cmd == nil && !held:
		return nil, rec, fmt.Errorf("%w: nothing holds %s%s", ErrNotRunning, d.dir, lastExitWords(d.dir)), false
	case d.cmd == nil:
		d.wait(ctx)
		return nil, rec, nil, true
	}
	return d.start(ctx, rec)
}

// dial dials the ready server rec.
func (d *dialing) dial(ctx context.Context, rec runnerstate.Record) (net.Conn, runnerstate.Record, error, bool) {
	if len(rec.Endpoints) == 0 {
		return nil, rec, fmt.Errorf("daemon: Dial %s: the holder (pid %d) published no Endpoints: it is not a server of package daemon", d.dir, rec.PID), false
	}
	if d.opts.Endpoint < 0 || d.opts.Endpoint >= len(rec.Endpoints) {
		return nil, rec, fmt.Errorf("daemon: Dial %s: endpoint %d asked, but the server (pid %d) publishes %d", d.dir, d.opts.Endpoint, rec.PID, len(rec.Endpoints)), false
	}
	ep := rec.Endpoints[d.opts.Endpoint]
	if err := checkNames("Dial", d.dir, ep.Address); err != nil {
		return nil, rec, err, false
	}
	if stopped, state := liveness.Stopped(liveness.Identity(rec.Process)); stopped {
		// Its socket would queue the connection and nobody would answer.
		return nil, rec, fmt.Errorf("daemon: Dial %s: the server (pid %d) is stopped (state %c: SIGSTOP, a terminal's Ctrl-Z or a debugger) and answers nothing until it is continued (SIGCONT)", d.dir, rec.PID, state), false
	}
	c, err := dialEndpoint(ctx, ep)
	c, err = checkPeer(c, err, ep, rec) // who accepted: the server's user, or root
	if err == nil {
		return c, rec, nil, false
	}
	if retryable(err) && !ended(ctx) {
		now, held, _ := runnerstate.Running(d.dir)
		stillReady := held && now.Ready && now.Leaving == "" && now.Process.Instance == rec.Process.Instance
		if !stillReady || exiting(ctx, now.Process) {
			return nil, rec, nil, true // it went, or is going: look again
		}
	}
	if ended(ctx) {
		// The dial's timeout was ctx's, or ctx ended while a refusing
		// server was given dyingBound.
		return nil, rec, d.ended(ctx, rec), false
	}
	hint := ""
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		hint = "; this user may not connect to it: run as the server's user, or have the server make its socket accessible"
	}
	return nil, rec, fmt.Errorf("daemon: dial %s %s (the server of %s, pid %d): %w%s", ep.Network, ep.Address, d.dir, rec.PID, err, hint), false
}

// dyingBound is how long a ready server that refused a connection, and is
// not yet seen exiting, is given to show it is: killed, a process closes its
// socket and its lock file in one step of its exit, and a look may fall
// between the two.
const dyingBound = 250 * time.Millisecond

// exiting reports whether the process id is going, so that its refusal was
// its death and not its answer: gone already, seen exiting
// (liveness.Exiting, as once a SIGKILL is acted on: then it is waited for,
// bounded by ctx only, since nothing can stop that exit, however long a
// loaded machine takes to finish it), or exiting within dyingBound.
func exiting(ctx context.Context, id runnerstate.Identity) bool {
	p, v, _ := liveness.Pin(liveness.Identity(id))
	if p == nil {
		return v == liveness.Dead || v == liveness.Stale
	}
	defer p.Close()
	if liveness.Exiting(liveness.Identity(id)) {
		p.Wait(ctx)
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, dyingBound)
	defer cancel()
	return p.Wait(ctx) == nil
}

// dialEndpoint dials ep; the dial is counted for tests (testHookDial).
func dialEndpoint(ctx context.Context, ep runnerstate.Endpoint) (net.Conn, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, ep.Network, ep.Address)
	if h := testHookDial.Load(); h != nil {
		(*h)(err)
	}
	return c, err
}

// testHookDial, when set, is told the outcome of every connect Dial makes.
var testHookDial atomic.Pointer[func(err error)]

// retryable reports whether err is a refusal a server that is going, or not
// yet there, gives.
func retryable(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ENOENT, syscall.ECONNRESET, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// start makes sure a ready server that will do runs, starting a copy of
// cmd through runnerstate.Start when none does; was is what held dir.
func (d *dialing) start(ctx context.Context, was runnerstate.Record) (net.Conn, runnerstate.Record, error, bool) {
	if d.failed >= maxStartFailures {
		// No more copies: wait for a server that is not ready yet but holds
		// dir or is being admitted; else (nothing there, or a ready one
		// this client would replace) the last copy's failure is the answer.
		if was.Ready || !d.othersThere() {
			return nil, was, d.last, false
		}
		d.wait(ctx)
		return nil, was, nil, true
	}
	rec, err := runnerstate.Start(ctx, d.dir, d.copyCmd(), runnerstate.StartOptions{
		Accept:    func(r runnerstate.Record) bool { return !older(r.Version, d.opts.Version) },
		Log:       d.opts.Log,
		Logger:    d.opts.Logger,
		Program:   d.opts.Program,
		NoBackoff: d.opts.NoBackoff,
	})
	var se *runnerstate.StartError
	switch {
	case err == nil:
		return nil, rec, nil, true // dial it (or what replaced it) on the next look
	case errors.As(err, &se) && se.ExitCode == -1 && ctx.Err() == nil:
		// The copy started did not exit before it was ready: it is ready
		// and older than this client too (Accept refused it), or it is
		// gone already, replaced by a server that may well do (a newer
		// one, or a takeover's). Look at what runs now, a few times.
		now, held, _ := runnerstate.Running(d.dir)
		if held && now.Usable() && older(now.Version, d.opts.Version) {
			return nil, now, fmt.Errorf("%w: %s: the server started is %s, older than this client's %s: %v", ErrIncompatible, d.dir, versionWords(now.Version), d.opts.Version, err), false
		}
		if d.replaced++; d.replaced < maxStartFailures {
			return nil, now, nil, true
		}
		return nil, now, err, false
	case errors.As(err, &se) && ctx.Err() == nil:
		// It exited before it was ready. Each such copy counts, whatever
		// holds dir: one Dial starts at most maxStartFailures (a copy that
		// failed fast beside a holder was started again until ctx ended).
		d.failed++
		d.last = err
		// A copy that stepped aside for a server that holds dir or is
		// taking it over leaves that one to wait for; one that failed by
		// itself, or stepped aside for a server that died the instant
		// after, is told apart by another copy, while any are left.
		if _, held, _ := runnerstate.Running(d.dir); !held && waiting(d.dir) {
			d.wait(ctx) // a starter is being admitted
			return nil, was, nil, true
		}
		// The failures before this copy hold every start back (Start's
		// backoff): that is said at once, without another copy.
		if se.Failures > 0 {
			return nil, was, err, false
		}
		if d.failed < maxStartFailures || d.othersThere() {
			return nil, was, nil, true
		}
	}
	return nil, was, err, false
}

// othersThere reports whether a server holds dir or a starter waits for
// it: a Dial that may start no more copies waits for that one.
func (d *dialing) othersThere() bool {
	_, held, _ := runnerstate.Running(d.dir)
	return held || waiting(d.dir)
}

// waiting reports whether a live starter waits in dir's takeover gate: a
// server is coming.
func waiting(dir string) bool {
	g, _, _ := gate.Read(dir)
	_, ok := g.NewestLive()
	return ok
}

// retaking reports whether a lingering server, alive, is taking dir back
// from a successor that failed before it was ready (its linger.json says
// so).
func retaking(dir string) bool {
	l, ok, _ := runnerstate.ReadLingering(dir)
	if !ok || !l.Retaking {
		return false
	}
	v, _ := liveness.Check(liveness.Identity(l.Holder))
	return v == liveness.Alive
}

// copyCmd is a fresh copy of the template cmd, marked to step aside for a
// newer server of its program.
func (d *dialing) copyCmd() *exec.Cmd {
	c := exec.Command(d.cmd.Path)
	c.Args = append([]string(nil), d.cmd.Args...)
	c.Env = d.cmd.Env
	if c.Env == nil {
		c.Env = os.Environ()
	}
	c.Env = append(c.Env[:len(c.Env):len(c.Env)], envYield+"=1")
	c.Dir = d.cmd.Dir
	c.ExtraFiles = append([]*os.File(nil), d.cmd.ExtraFiles...)
	if d.cmd.SysProcAttr != nil {
		attr := *d.cmd.SysProcAttr
		c.SysProcAttr = &attr
	}
	c.Stdout, c.Stderr = d.cmd.Stdout, d.cmd.Stderr
	return c
}

// wait waits for a change in dir (bounded by ctx).
func (d *dialing) wait(ctx context.Context) {
	if d.w == nil {
		d.w = dirwatch.New(d.dir)
	}
	d.w.Wait(ctx, 0, nil)
}

func (d *dialing) close() {
	if d.w != nil {
		d.w.Close()
	}
}

// ended reports whether ctx has ended, or its deadline has passed (its
// timer may fire an instant later: a dial already gave up on it).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// ctxErr is ctx.Err(), or DeadlineExceeded when its deadline has passed
// and its timer has not fired yet.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// ended is the answer when ctx ended: it wraps ctx.Err() and names the
// holder.
func (d *dialing) ended(ctx context.Context, rec runnerstate.Record) error {
	now, held, _ := runnerstate.Running(d.dir)
	switch {
	case held && now.PID != 0:
		state := "not ready"
		if now.Leaving != "" {
			state = "leaving (" + now.Leaving + ")"
		}
		return fmt.Errorf("daemon: Dial %s: the server (pid %d) is %s: %w", d.dir, now.PID, state, ctxErr(ctx))
	case held:
		return fmt.Errorf("daemon: Dial %s: held by a process that cannot be named: %w", d.dir, ctxErr(ctx))
	}
	_ = rec
	return fmt.Errorf("daemon: Dial %s: no server became ready: %w", d.dir, ctxErr(ctx))
}

// lastExitWords says how the last server of dir ended, when it ended
// without releasing it and that is known (runnerstate.Report.LastExit):
// "; the last server, pid 7 (v1.2.0), ended: signal 9 at …, its log
// ending: …"; "" otherwise.
func lastExitWords(dir string) string {
	looked := time.Now()
	r, err := runnerstate.Status(dir)
	if err != nil || r.LastExit == nil {
		return ""
	}
	e := r.LastExit
	s := fmt.Sprintf("; the last server, pid %d", e.Process.PID)
	if e.Version != "" {
		s += " (" + e.Version + ")"
	}
	switch {
	case e.How == "unknown" && !e.Gone.Before(looked):
		s += ", is gone (found so now: when and how it ended are not known)"
	case e.How == "unknown":
		s += fmt.Sprintf(", was found gone at %s, how it ended unknown", e.Gone.Format(time.RFC3339))
	default:
		s += fmt.Sprintf(", ended: %s at %s", e.How, e.Gone.Format(time.RFC3339))
	}
	if n := len(e.Log); n > 0 {
		s += fmt.Sprintf(", its log ending: %q", e.Log[n-1])
	}
	return s
}

func versionWords(v string) string {
	if v == "" {
		return "an unversioned build"
	}
	return "version " + v
}

// Stop asks the server of dir to go (mode runnerstate.RestartDrain, the
// default for "", or RestartNow) and waits until that server has let dir
// go (a successor may hold it by then), or ctx ends. Nothing holds dir: nil
// at once. It never signals.
//
// Errors: runnerstate.ErrBadMode for another mode; RequestRestartContext's
// (its wait for the state lock ends with ctx: a *runnerstate.BusyError
// naming .state.lock and its holder); an error wrapping ctx.Err() naming
// the holder when ctx ends first.
func Stop(ctx context.Context, dir, mode string) error {
	if mode == "" {
		mode = runnerstate.RestartDrain
	}
	if runnerstate.ModeStrength(mode) == 0 {
		return fmt.Errorf("daemon: Stop %s: %w, not %q", dir, runnerstate.ErrBadMode, mode)
	}
	rec, held, err := runnerstate.Running(dir)
	if err != nil {
		return err
	}
	if !held {
		return nil
	}
	if err := runnerstate.RequestRestartContext(ctx, dir, mode); err != nil {
		return fmt.Errorf("daemon: Stop %s: asking the server (pid %d) to go: %w", dir, rec.PID, err)
	}
	w := dirwatch.New(dir)
	defer w.Close()
	for {
		now, held, err := runnerstate.Running(dir)
		if err != nil {
			return err
		}
		if !held || !sameHolder(rec, now) {
			return nil
		}
		if w.Wait(ctx, 100*time.Millisecond, nil) != nil {
			return fmt.Errorf("daemon: Stop %s: the server (pid %d) has not let the directory go (asked: %s): %w", dir, rec.PID, mode, ctx.Err())
		}
	}
}

// sameHolder reports whether b names the holder a named.
func sameHolder(a, b runnerstate.Record) bool {
	if a.Process.Instance != "" && b.Process.Instance != "" {
		return a.Process.Instance == b.Process.Instance
	}
	return a.PID == b.PID
}

// otherProgram refuses dir, whose verified holder's record is rec, when
// that record names another program than program (both non-empty), as
// runnerstate.Takeover and Start do: an error matching
// runnerstate.ErrOtherProgram and runnerstate.ErrBusy (a
// *runnerstate.BusyError) naming both programs; nil otherwise.
func otherProgram(dir string, rec runnerstate.Record, program string) error {
	if program == "" || rec.Program == "" || rec.Program == program {
		return nil
	}
	be := &runnerstate.BusyError{Path: filepath.Join(dir, runnerstate.LockName), PID: rec.PID, Verified: true}
	return fmt.Errorf("%w: %s is held by %q (pid %d), not %q: %w", runnerstate.ErrOtherProgram, dir, rec.Program, rec.PID, program, be)
}
