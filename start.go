package runnerstate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/runnerstate/runnerstate/internal/accept"
	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/spawn"
)

// Start and its decisions: whether a ready runner will do, whether to wait
// for an attempt or a holder, whether to make an attempt, and what an
// attempt's end means. The attempt's mechanism (start.json, start.lock,
// the child, its reaper, its readiness) is attempt.go.

// StartOptions says which ready runner will do, and where a started
// runner's output goes. The zero value accepts any ready runner and appends
// its output to <dir>/runner.log.
type StartOptions struct {
	// Accept reports whether the ready runner found in dir will do (for
	// example, its Meta names this client's version). nil accepts any ready
	// runner. A ready runner that Accept refuses is replaced: Start starts
	// cmd, and the new runner's own Takeover asks the old one to go.
	//
	// One Start call asks Accept once per distinct record it sees, from the
	// goroutine that called Start: two records are distinct when they name
	// another holder (Process) or differ in any field (as their JSON
	// encodings compare), so the answer for a record is remembered while
	// the call waits, and a runner that publishes a changed record is asked
	// about again. Accept is never asked of a record that is not ready.
	Accept func(Record) bool
	// Log is the file the started process's stdout and stderr are appended to
	// when cmd.Stdout and cmd.Stderr are nil. Default: <dir>/runner.log (0600).
	// It is never opened through a symlink, and must be a regular file.
	Log string
	// Logger receives what Start did (Info: the runner it started, its pid
	// and log file); nil means the package's logger (SetLogger), which by
	// default does not print it: a Start with no logger set logs nothing.
	Logger *slog.Logger
	// Program, when set, refuses a directory whose verified holder's record
	// names another Program with ErrOtherProgram (see TakeoverOptions).
	Program string
	// LogMaxBytes bounds Log: before it starts cmd and appends to Log, Start
	// rotates a Log larger than this many bytes, keeping Log.1 (the newest)
	// to Log.3, as docs/operations.md says. Zero means 8 MiB; negative
	// never rotates. Only a Log that Start opens itself is rotated (not when
	// cmd.Stdout and cmd.Stderr are set), only when Start starts cmd, and
	// once for concurrent Starts. A rotation that fails (a directory at
	// Log.3, say) is logged and the log appended to as it is.
	LogMaxBytes int64
	// NoBackoff makes this call start cmd even in the backoff window that
	// consecutive failures open (see Start), for example for an operator
	// who has just fixed the cause. It changes nothing for other callers.
	NoBackoff bool
}

// ErrStartFailed is matched (errors.Is) by every *StartError: the runner
// Start started did not become ready.
var ErrStartFailed = errors.New("runnerstate: the runner started did not become ready")

// StartError is Start's answer when the runner it started, or whose start it
// waited for, did not become ready: it could not be started, it exited
// first, the caller's context ended first, or Accept refused it too.
type StartError struct {
	Dir      string // the runner directory, absolute
	PID      int    // the process Start started (0 if it could not be started)
	ExitCode int    // its exit status; 128+n when signal n ended it; -1 when it had not exited, or when this caller could not learn the status
	Log      string // the file its output went to ("" when the caller set cmd.Stdout/Stderr)
	LogTail  string // the last lines written to that file since this attempt began, at most 4 KiB
	Err      error  // why: the exec error, the exit error, or ctx.Err()
	// Failures is the number of consecutive attempts that failed, this
	// one's included, when they are 2 or more and no attempt is made
	// before RetryAt (the backoff); else 0.
	Failures int
	// RetryAt is when the backoff lets the next attempt be made, when
	// Failures is set; else the zero time.
	RetryAt time.Time
	// Exit is how the process went away, when it did and this is known:
	// How ("exit 2", "signal 9", or "unknown") and its log's last lines.
	Exit *Exit
}

// Error names the directory, the pid, the exit status and the log file,
// and quotes the last line of LogTail, cut to about 200 characters.
func (e *StartError) Error() string {
	var b strings.Builder
	b.WriteString("runnerstate: start the runner of ")
	b.WriteString(e.Dir)
	switch {
	case e.PID == 0 && (errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded)):
		b.WriteString(": no runner became ready") // and Err says what this call waited for
	case e.PID == 0:
		b.WriteString(": the command could not be started")
	case e.ExitCode == 0:
		// A command that puts the runner in the background and exits
		// (sh -c 'runner &') looks like this.
		fmt.Fprintf(&b, ": pid %d exited with status 0 before it was ready (Start waits for the process it starts: start the runner itself, not a command that leaves it in the background)", e.PID)
	case e.ExitCode > 0:
		// Err is that exit ("exit status 7"): said once.
		fmt.Fprintf(&b, ": pid %d exited with status %d before it was ready", e.PID, e.ExitCode)
	default:
		fmt.Fprintf(&b, ": pid %d is not ready", e.PID)
	}
	if e.Err != nil && (e.PID == 0 || e.ExitCode < 0) {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Log != "" {
		b.WriteString("; its output is in ")
		b.WriteString(e.Log)
	}
	if line := lastLogLine(e.LogTail); line != "" {
		// The cause is most often there (a server's "bind: invalid
		// argument"): seen without opening the log.
		b.WriteString(", ending: ")
		b.WriteString(line)
	}
	if e.Failures > 0 {
		fmt.Fprintf(&b, "; %d consecutive failed starts: no runner is started before %s (in %s; NoBackoff starts one now)",
			e.Failures, e.RetryAt.Format(time.RFC3339Nano), max(0, time.Until(e.RetryAt)).Round(time.Millisecond))
	}
	return b.String()
}

// maxLogLine bounds, in characters, the line of the log an error quotes.
const maxLogLine = 200

// lastLogLine is the last non-empty line of tail, quoted where it is not
// printable (a log is the runner's, and may hold escape sequences), and cut
// in the middle to about maxLogLine characters: its beginning names what
// failed, and its end, in Go's "op: cause" errors, the cause.
func lastLogLine(tail string) string {
	tail = strings.TrimRight(tail, " \t\r\n")
	if p := panicLine(tail); p != "" {
		tail = p // a Go panic's stack ends the log: its cause is above it
	} else if i := strings.LastIndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	var esc strings.Builder
	for _, r := range strings.TrimSpace(tail) { // a byte that is not UTF-8 is read as U+FFFD
		if unicode.IsPrint(r) {
			esc.WriteRune(r)
		} else {
			q := strconv.QuoteRune(r)
			esc.WriteString(q[1 : len(q)-1])
		}
	}
	line := esc.String()
	if r := []rune(line); len(r) > maxLogLine {
		line = string(r[:maxLogLine/2]) + "…" + string(r[len(r)-maxLogLine/2:])
	}
	return line
}

// panicLine is the last line of tail that says why a Go program died
// ("panic: …", "fatal error: …") when a goroutine trace follows it to the
// end of tail; "" otherwise.
func panicLine(tail string) string {
	lines := strings.Split(tail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			for _, after := range lines[i+1:] {
				if a := strings.TrimSpace(after); a != "" && !strings.HasPrefix(a, "goroutine ") && !strings.HasPrefix(after, "\t") &&
					!strings.HasPrefix(a, "[") && !strings.HasPrefix(a, "exit status") && !strings.HasPrefix(a, "created by ") && !strings.Contains(a, "(") {
					return "" // something else was said after it
				}
			}
			return l
		}
	}
	return ""
}

// Is reports true for ErrStartFailed.
func (e *StartError) Is(target error) bool { return target == ErrStartFailed }

// Unwrap returns Err.
func (e *StartError) Unwrap() error { return e.Err }

// How Start rotates the log it opens (StartOptions.LogMaxBytes).
const (
	defaultLogMax = 8 << 20 // bytes, when LogMaxBytes is 0
	logKeep       = 3       // rotated logs kept: Log.1 (newest) to Log.3
)

// Start returns the record of a ready runner in dir that opts.Accept
// accepts, starting cmd, detached, when there is none: ready means the
// verified holder of runner.lock has published (Publish) and is not asked
// to restart. Concurrent Starts, in any number of processes, share one
// attempt: one process is started, and every caller gets its ready record
// or the same *StartError. The process started takes dir itself, with
// Takeover and Publish: cmd runs the runner, not a command that leaves it
// in the background, and the caller must not call cmd.Wait (the package
// reaps it). Start waits for a runner not ready yet, or leaving; ctx is
// the only bound, and a process not ready when it ends is left running.
// After k >= 2 consecutive failed attempts nothing is started before the
// last one's end + 250 ms × 2^(k-2) (at most 30 s): a call meanwhile gets
// that failure's *StartError at once, with Failures and RetryAt (only a
// ctx whose deadline is later waits, and tries once; StartOptions.NoBackoff).
// The contract point by point: [docs/operations.md]; the files: [docs/protocol.md].
//
// Errors, before anything but dir is created: an error naming what is
// wrong for a nil cmd, a cmd already started, a stream that is not an
// *os.File, a dir that is a file or cannot be created, a command that does
// not exist or is not in PATH, a Log that is a symlink or not a regular
// file; ErrLockingUnsupported on a filesystem whose locks do not exclude;
// ErrNewerProtocol when a file of dir says a newer protocol. Then: a
// *StartError (errors.Is ErrStartFailed) when the runner did not become
// ready; the errors of Running; an error naming a start.lock or start.json
// that is a symlink, a directory or another non-regular file. Touches
// start.lock, start.json and the log in dir (and Log.1 to Log.3:
// StartOptions.LogMaxBytes); reads what Running reads.
//
// [docs/operations.md]: https://github.com/runnerstate/runnerstate/blob/main/docs/operations.md#what-start-promises
// [docs/protocol.md]: https://github.com/runnerstate/runnerstate/blob/main/docs/protocol.md#start
func Start(ctx context.Context, dir string, cmd *exec.Cmd, opts StartOptions) (Record, error) {
	since := time.Now()
	if err := ownDir("Start", dir); err != nil {
		return Record{}, err
	}
	if cmd == nil {
		return Record{}, errorf("Start %s: the command is nil; pass the exec.Cmd that runs the runner", dir)
	}
	if cmd.Process != nil {
		return Record{}, errorf("Start %s: the command %s has been started already; pass a new exec.Cmd", dir, cmd.Path)
	}
	accepts := accept.Once(opts.Accept)
	if err := filelock.Judge(filepath.Join(dir, LockName)); err != nil {
		return Record{}, public(err) // nothing started, nothing created
	}
	if rec, held, ready, err := probeStart(dir); err != nil {
		return Record{}, err
	} else if err := otherProgram(dir, rec, opts.Program); held && err != nil {
		return Record{}, err
	} else if ready && accepts(rec) {
		return rec, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Record{}, pathError("Start", dir, err)
	}
	if ctx.Err() != nil {
		return Record{}, &StartError{Dir: abs, ExitCode: -1, Err: fmt.Errorf("%w, before this call looked for an attempt (this call ran no command of its own)", ctx.Err())}
	}
	if err := checkProtocol(dir, true); err != nil {
		return Record{}, err // nothing started, nothing created
	}
	if err := checkStartInput(dir, cmd, opts); err != nil {
		return Record{}, err
	}
	if err := ensureDir(dir); err != nil {
		return Record{}, err
	}
	if err := filelock.Judge(filepath.Join(dir, LockName)); err != nil {
		return Record{}, public(err) // dir was just made: judged before anything is created in it
	}
	if opts.Logger == nil {
		opts.Logger = logger()
	}
	if opts.Log == "" && cmd.Stdout == nil && cmd.Stderr == nil {
		opts.Log = filepath.Join(abs, logName)
	} else if cmd.Stdout != nil && cmd.Stderr != nil {
		opts.Log = ""
	}
	c := &startCall{dir: dir, abs: abs, cmd: cmd, logPath: opts.Log, logMax: cmp.Or(opts.LogMaxBytes, defaultLogMax), log: opts.Logger,
		accept: accepts, since: since, unreadable: &unreadableSince{}, noBackoff: opts.NoBackoff}
	rec, err := c.run(ctx)
	if se, ok := err.(*StartError); ok {
		se.Err = whyNotReady(dir, se)
	}
	return rec, err
}

// whyNotReady is e's reason, with the cause when a runner that still runs
// could not be known ready because its record cannot be read (a context
// that ended before recordUnreadableFor did).
func whyNotReady(dir string, e *StartError) error {
	if e.ExitCode >= 0 || !errors.Is(e.Err, context.Canceled) && !errors.Is(e.Err, context.DeadlineExceeded) {
		return e.Err
	}
	if _, state, err := readRecord(dir); state == fileCorrupt {
		return fmt.Errorf("%w; %w", e.Err, recordUnreadableWhy(dir, err))
	}
	return e.Err
}

// recordUnreadableFor is how long runner.json may stay unreadable under
// one verified holder before Start stops waiting for that holder to be
// ready. A record being replaced is unreadable for a moment at most (a
// rename over it is atomic; on Windows it may not be opened while it is
// renamed), while one that stays so leaves its runner never known ready,
// and the caller's context, maybe with no deadline, would be waited out.
const recordUnreadableFor = time.Second

// unreadableSince follows, for one Start call, since when each look has
// found runner.json unreadable under the same verified holder.
type unreadableSince struct {
	holder Identity
	since  time.Time // zero: the last look found nothing wrong
}

// still takes one look, at now: unreadable says that runner.json could not
// be read while holder, verified, held the directory. It reports whether
// every look has found so, under that holder, for recordUnreadableFor.
func (u *unreadableSince) still(holder Identity, unreadable bool, now time.Time) bool {
	switch {
	case !unreadable:
		*u = unreadableSince{}
		return false
	case u.since.IsZero() || !sameProcess(u.holder, holder):
		u.holder, u.since = holder, now
	}
	return now.Sub(u.since) >= recordUnreadableFor
}

// unreadableUnder is the verified holder of dir and why its runner.json
// cannot be read; a nil error when it can, when it is absent, when no
// holder is verified (one that cannot be verified is not ready yet), or when a
// restart request is pending for the holder (it is leaving: Start waits
// for it to go, as for any runner asked to restart).
func unreadableUnder(dir string) (Identity, error) {
	_, state, why := readRecord(dir)
	if state != fileCorrupt {
		return Identity{}, nil
	}
	st := inspectRunner(dir)
	if st.err != nil || !st.occupancy().verified() {
		return Identity{}, nil
	}
	if req, asked := pendingRestart(dir); asked && (req.For == "" || req.For == st.holder.Instance) {
		return Identity{}, nil
	}
	return st.holder, why
}

// recordUnreadableWhy says that dir's runner.json cannot be read (why, which
// it wraps), so its runner cannot be known ready, and what the caller's
// program can do.
func recordUnreadableWhy(dir string, why error) error {
	path := filepath.Join(dir, RecordName)
	cause := why
	if pe, ok := why.(*fs.PathError); ok && pe.Path == path {
		cause = pe.Err // the path is said once
	}
	if unusablePath(why) {
		return fmt.Errorf("the runner's record %s cannot be read (%w), so it cannot be known ready: move %s away, then ask the runner to go (RequestRestart(dir, RestartNow)) and Start again", path, cause, path)
	}
	return fmt.Errorf("the runner's record %s cannot be read (%w), so it cannot be known ready until it publishes again (Publish): ask it to go (RequestRestart(dir, RestartNow)) and Start again, or see Status", path, cause)
}

// checkStartInput refuses what Start can tell is wrong before it creates
// anything: a dir that is a file, a command that cannot be found, a stream
// that is not a file, a log that is not a regular file.
func checkStartInput(dir string, cmd *exec.Cmd, opts StartOptions) error {
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return pathError("Start", dir, durable.ErrNotDir)
	}
	if err := spawn.Check(cmd); err != nil {
		return errorf("Start %s: %w", dir, err)
	}
	if opts.Log != "" {
		if fi, err := os.Lstat(opts.Log); err == nil {
			if err := durable.CheckMode(opts.Log, fi.Mode()); err != nil {
				return public(err)
			}
		}
	}
	return nil
}

// probeStart is Running's answer: the record, whether the lock is held, and
// whether the holder is ready: its record Usable, and not askedToRestart (a
// runner draining or stopping is leaving, and Start waits for it to go
// rather than hand it back). A leaving runner's record says Ready false
// itself (WatchRestart marks it); the pending request covers the instant
// before the mark.
func probeStart(dir string) (rec Record, held, ready bool, err error) {
	rec, held, err = Running(dir)
	if err != nil {
		// The real error comes first: restart.json, read next, would only
		// fail the same way (a path over PATH_MAX, say) and say it of itself.
		return rec, held, false, err
	}
	ready = held && rec.Usable() && !askedToRestart(dir, rec)
	return rec, held, ready, err
}

// askedToRestart reports whether a restart request is pending for rec's
// runner (addressed to its instance, or to whoever holds dir): what Start
// asks of a ready runner beyond Record.Usable, and Dial does not.
func askedToRestart(dir string, rec Record) bool {
	req, asked := pendingRestart(dir)
	return asked && (req.For == "" || req.For == rec.Process.Instance)
}

// startPoll is how often a caller looks where nothing notifies it.
const startPoll = 10 * time.Millisecond

// outcomeWait bounds how long a caller that saw the child of another
// process's attempt exit waits for the caller that started it to record
// the exit status, while that caller lives.
const outcomeWait = 2 * time.Second

// errAgain says a wait ended in a state the caller must look at again.
var errAgain = errors.New("look again")

// startCall is one Start call past its fast path: what it waits for, what
// it starts, and what it has started.
type startCall struct {
	dir        string // as the caller named it
	abs        string // its absolute path: attempts and looks are shared by it
	cmd        *exec.Cmd
	logPath    string // where cmd's stdout and stderr are appended when it leaves them nil; "" for none
	logMax     int64  // rotate that log over this size; <= 0 never
	log        *slog.Logger
	accept     func(Record) bool
	since      time.Time        // when the call began
	unreadable *unreadableSince // the call's looks at an unreadable record

	spawned   bool // this call started cmd: it never starts another
	noBackoff bool // StartOptions.NoBackoff
	waitedOut bool // this call waited for a backoff window to end: it never waits again
}

// run returns the record of a ready runner that accept accepts, starting
// cmd when there is none and no attempt is in progress, and waiting on the
// attempt otherwise. Errors: a *StartError when the runner started, or
// whose start it waited for, did not become ready, or ctx ended first;
// otherwise those of the files.
func (c *startCall) run(ctx context.Context) (Record, error) {
	defer joinLooks(c.abs)()
	w := dirwatch.New(c.dir)
	defer w.Close()
	woke := time.Now()
	for {
		// A ready runner, or an attempt in progress, is seen without the
		// lock, which only a caller about to start one needs: a crowd of
		// callers never queues on it, and sees a runner ready even while
		// the caller that started it still holds it.
		look := c.lookAfter(woke)
		if look.err != nil {
			return Record{}, look.err
		}
		if look.ready && c.accept(look.rec) {
			return look.rec, nil
		}
		if c.backingOff(look.held && !look.ready, look.att, look.haveAtt) {
			// In a backoff window: said at once, without start.lock.
			rec, err := Record{}, c.backedOff(ctx, look.att)
			if err != errAgain {
				return rec, err
			}
			woke = time.Now()
			continue
		}
		if a := look.att; look.haveAtt && a.inProgress(c.abs) && !c.spawned && !readyChild(a, look.rec, look.ready) {
			rec, err := c.await(ctx, a)
			if err != errAgain {
				return rec, err
			}
			woke = time.Now()
			continue
		}
		// The lock busy: another caller is deciding, or making an attempt. Rather
		// than queue behind every other caller's probe, wait for what it
		// records (or look again in 10 ms), and take the attempt it made.
		release, busy, err := tryStartLock(c.dir)
		if busy {
			if err := w.Wait(ctx, startPoll, nil); err != nil {
				return Record{}, c.busyEnded(err, look)
			}
			woke = time.Now()
			continue
		}
		if err != nil {
			return Record{}, err
		}
		rec, err := c.decide(ctx, release)
		if err != errAgain {
			return rec, err
		}
	}
}

// busyEnded is the failure of a call whose context ended (err) while
// start.lock was busy: another caller deciding, or a child marking its
// attempt ready. A runner that held the directory, not ready, at the last
// look is named, as awaitHolder names it: the lock's holder is no runner.
func (c *startCall) busyEnded(err error, l startLook) *StartError {
	if l.held && !l.ready {
		return c.holderEnded(err, l.rec.PID)
	}
	return &StartError{Dir: c.abs, ExitCode: -1, Err: fmt.Errorf("%w, waiting while another caller decided whether to start the runner (this call ran no command of its own)", err)}
}

// probe is probeStart, and the call's bound on a holder whose record
// cannot be read: once every look for recordUnreadableFor has found it so,
// under the same verified holder, a *StartError naming that holder, the
// file and what to do, instead of a wait until ctx ends.
func (c *startCall) probe() (Record, bool, bool, error) {
	rec, held, ready, err := probeStart(c.dir)
	if err != nil {
		return rec, held, ready, err
	}
	var holder Identity
	var why error
	if held && !ready {
		holder, why = unreadableUnder(c.dir)
	}
	if c.unreadable.still(holder, why != nil, time.Now()) {
		err = &StartError{Dir: c.abs, PID: holder.PID, ExitCode: -1, Err: recordUnreadableWhy(c.dir, why)}
	}
	return rec, held, ready, err
}

// decide decides, holding start.lock (which it releases), what this call
// does: return the runner, wait for an attempt or a holder, or start cmd.
func (c *startCall) decide(ctx context.Context, release func()) (Record, error) {
	rec, held, ready, err := c.probe()
	if err != nil {
		release()
		return Record{}, err
	}
	if ready && c.accept(rec) {
		release()
		return rec, nil
	}
	a, have, err := readAttemptErr(c.dir)
	if err != nil {
		release()
		return Record{}, err
	}
	switch {
	case have && readyChild(a, rec, ready) && c.spawned:
		release()
		return Record{}, c.refused(a)
	case have && a.inProgress(c.abs) && !readyChild(a, rec, ready):
		release()
		return c.await(ctx, a)
	case have && a.Failed && a.Ended.After(c.since):
		// It failed while this call waited for the lock.
		release()
		return Record{}, a.failure(c.abs)
	case held && !ready:
		// Held, not ready, and nothing an attempt started: a runner being
		// admitted, or one that cannot be verified. Wait for it, start
		// nothing.
		release()
		return c.awaitHolder(ctx, rec.PID)
	case c.spawned:
		release()
		return Record{}, &StartError{Dir: c.abs, PID: a.Child.PID, ExitCode: -1, Log: a.Log, Err: errors.New("the runner this call started is gone, and no attempt is recorded for it")}
	}
	if have && a.gone() {
		a = c.recordGone(a)
	}
	if c.backingOff(false, a, have) { // held here: ready, and accept refused it
		release()
		return Record{}, c.backedOff(ctx, a)
	}
	a, err = c.spawn(a, held)
	release()
	if err != nil {
		return Record{}, err
	}
	return c.await(ctx, a)
}

// refused is the answer when accept refused the runner this call started.
func (c *startCall) refused(a startAttempt) error {
	return &StartError{Dir: c.abs, PID: a.Child.PID, ExitCode: -1, Log: a.Log, Err: errRefused}
}

// await waits on attempt a: until its child is ready (or another ready
// runner that accept accepts appears), it exited first, or ctx ends.
// errAgain when the state changed under it (a newer attempt, or a ready
// child of a's that accept refuses: the caller's own attempt replaces it).
func (c *startCall) await(ctx context.Context, a startAttempt) (Record, error) {
	own := ownChildOf(c.abs, a.Seq)
	exited, readyCh, stop := watchAttempt(ctx, a, own)
	defer stop()
	w := dirwatch.New(c.dir)
	defer w.Close()
	poll := startPoll
	if w.Changed() != nil {
		poll = w.Interval()
	}
	timer := time.NewTimer(poll)
	defer timer.Stop()
	var goneAt time.Time
	woke := time.Now()
	for {
		l := c.lookAfter(woke)
		if own != nil && l.err == nil && readyChild(a, l.rec, l.ready) {
			own.ready.Store(true) // settle then knows it was ready, whatever its exit
		}
		if rec, done, err := c.judge(l, a); done {
			return rec, err
		}
		if !goneAt.IsZero() {
			switch {
			case own != nil:
				return Record{}, exitFailure(c.abs, a, own.child.ExitCode(), own.child.WaitErr())
			case time.Since(goneAt) > outcomeWait || !verifiedAlive(a.By):
				return Record{}, exitFailure(c.abs, a, -1, nil)
			}
		}
		timer.Reset(poll)
		select {
		case <-ctx.Done():
			return Record{}, c.ended(ctx, a)
		case <-w.Changed():
		case <-readyCh:
			readyCh = nil
		case <-exited:
			exited, goneAt, poll = nil, time.Now(), startPoll
		case <-timer.C:
		}
		woke = time.Now()
	}
}

// judge is what a look l says of a wait on attempt a: done with a record
// or an error (errAgain: look at the directory again from the start), or
// not done, to wait on. This is where an attempt is over.
func (c *startCall) judge(l startLook, a startAttempt) (rec Record, done bool, err error) {
	rec, ready := l.rec, l.ready
	if l.err != nil {
		return Record{}, true, l.err
	}
	if readyChild(a, rec, ready) {
		switch {
		case c.accept(rec):
			return rec, true, nil
		case c.spawned:
			return Record{}, true, c.refused(a)
		}
		return Record{}, true, errAgain
	}
	if ready && c.accept(rec) {
		return rec, true, nil
	}
	if cur, ok := l.att, l.haveAtt; ok && cur.Seq != a.Seq {
		return Record{}, true, errAgain
	} else if ok && cur.Failed {
		return Record{}, true, cur.failure(c.abs)
	} else if ok && (!cur.Ended.IsZero() || cur.Ready) {
		return Record{}, true, errAgain // it was ready, and has let go or exited since
	}
	return Record{}, false, nil
}

// ended is the failure of a wait on attempt a whose context ended first.
func (c *startCall) ended(ctx context.Context, a startAttempt) *StartError {
	err := ctx.Err()
	if !c.spawned {
		// The caller's command never ran: say whose attempt it waited
		// for, and how to end it.
		err = fmt.Errorf("%w, waiting for the attempt pid %d made at %s (this call ran no command of its own; while that process lives and is not ready, every Start waits for it: stop pid %d to start another)",
			err, a.By.PID, a.Began.Format(time.RFC3339), a.Child.PID)
	}
	return &StartError{Dir: c.abs, PID: a.Child.PID, ExitCode: -1, Log: a.Log, LogTail: logTail(a.Log, a.LogFrom), Err: err}
}

// awaitHolder waits while the directory is held by a runner that is not
// ready and was not started by an attempt: until it is ready, the lock is
// free, an attempt appears, or ctx ends (a *StartError naming pid, the
// holder).
func (c *startCall) awaitHolder(ctx context.Context, pid int) (Record, error) {
	w := dirwatch.New(c.dir)
	defer w.Close()
	for {
		if err := w.Wait(ctx, startPoll, nil); err != nil {
			return Record{}, c.holderEnded(err, pid)
		}
		_, held, ready, err := c.probe()
		if err != nil {
			return Record{}, err
		}
		if a, ok, _ := readAttemptErr(c.dir); ready || !held || (ok && a.pending()) {
			return Record{}, errAgain
		}
	}
}

// holderEnded is the failure of a wait for pid, the holder of the
// directory, not ready, whose context ended (err).
func (c *startCall) holderEnded(err error, pid int) *StartError {
	return &StartError{Dir: c.abs, PID: pid, ExitCode: -1, Err: fmt.Errorf("%w, waiting for the runner that holds the directory, not ready or asked to restart, to be ready or to go (this call ran no command of its own)", err)}
}
