// Command runnerctl shows and steers the runner of a directory.
//
//	runnerctl status [--json]          who runs there, verified or not, and what waits
//	runnerctl restart --drain|--now    ask the runner to restart
//	runnerctl clear-stale              clear a dead runner's leftovers
//	runnerctl wait [--timeout 30s]     wait until no runner holds the directory
//	runnerctl start -- CMD ARGS...     make sure a runner is ready, starting CMD detached
//	runnerctl stop [--drain|--now]     ask the server to go, and wait until it has
//
// Every command takes --dir (default $XDG_RUNTIME_DIR/runnerstate-demo, else
// $TMPDIR/runnerstate-demo-<uid>: the demo
// runner's) and --help. Exit codes follow the conventions operators already
// script against: status answers like an LSB init script's status action
// (and systemctl is-active), 0 when a runner runs, 3 when none does, 4 when
// it cannot tell, and 75 when none does but a previous runner's processes
// (orphans of its tree) still keep the directory busy; a refusal because a
// runner holds the directory is 75
// (EX_TEMPFAIL, runnerstate.ExitBusy), as flock(1) -E lets one choose; 2 is
// a usage error and 1 any other error; start exits 0 when a runner is
// ready and 1 when the one it started did not become ready (its log tail
// is printed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/daemon"
	"github.com/runnerstate/runnerstate/examples/internal/demodir"
)

// Exit codes.
const (
	exitOK         = 0
	exitError      = 1
	exitUsage      = 2
	exitNotRunning = 3 // LSB status: program is not running
	exitUnknown    = 4 // LSB status: program or service status is unknown
	exitBusy       = runnerstate.ExitBusy
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: runnerctl <command> [flags]

commands:
  status [--json]          show who runs the directory
  restart --drain|--now    ask the runner to restart
  clear-stale              clear a dead runner's leftovers
  wait [--timeout D]       wait until no runner holds the directory
  start [--timeout D] [--json] -- CMD [ARGS...]
                           make sure a runner is ready, starting CMD when none is
  stop [--drain|--now] [--timeout D]
                           ask the server to go, and wait until it has

every command takes --dir DIR (default $XDG_RUNTIME_DIR/runnerstate-demo, else
$TMPDIR/runnerstate-demo-<uid>) and --help
("runnerctl <command> --help" lists its flags and exit codes).

exit codes: 0 done (status: a runner runs; start: a runner is ready); 1 error
(start: the runner started did not become ready); 2 usage;
3 no runner (status, restart); 4 status cannot tell; 75 the directory is
busy: a runner holds it (clear-stale, wait, stop), or orphans of a previous
runner's tree do (status); 130 or 143 interrupted by SIGINT or SIGTERM
(wait, start, stop).
`

// command is one subcommand: what it does, its exit codes, its flags.
type command struct {
	synopsis string
	exits    string
	flags    func(fs *flag.FlagSet) func(dir string, stdout, stderr io.Writer) int
	rest     bool // takes arguments after its flags (start's command)
}

var commands = map[string]command{
	"status": {
		synopsis: "status [--dir DIR] [--json]\n\nShow who runs the directory: the holder of its kernel lock, whether its\nidentity is verified, a daemon server's program, version and endpoints,\nthe pending restart request, waiting starters, a lingering server (one\nthat handed the directory over and still serves its open connections),\nstale pids, orphans of a previous runner's tree, and warnings.",
		exits:    "0 a runner holds the directory; 3 no runner does (also when there is no\nsuch directory: the text says so); 75 no runner does, but orphans of a\nprevious runner's tree keep it busy; 4 cannot tell (the directory cannot\nbe read, its filesystem's locks do not exclude, or other users can write it); 2 usage.",
		flags: func(fs *flag.FlagSet) func(string, io.Writer, io.Writer) int {
			asJSON := fs.Bool("json", false, "print the report as JSON (the field names are stable)")
			return func(dir string, stdout, stderr io.Writer) int { return status(dir, *asJSON, stdout, stderr) }
		},
	},
	"restart": {
		synopsis: "restart [--dir DIR] --drain|--now\n\nAsk the runner to restart: --drain finishes the running jobs and takes no\nnew one, --now stops at once. A pending request is never weakened.",
		exits:    "0 requested; 3 no runner holds the directory; 1 error; 2 usage.",
		flags: func(fs *flag.FlagSet) func(string, io.Writer, io.Writer) int {
			drain := fs.Bool("drain", false, "finish the running jobs, take no new one, then exit")
			now := fs.Bool("now", false, "exit at once")
			return func(dir string, stdout, stderr io.Writer) int {
				if *drain == *now {
					fmt.Fprintln(stderr, "runnerctl restart: give exactly one of --drain and --now")
					return exitUsage
				}
				mode := runnerstate.RestartDrain
				if *now {
					mode = runnerstate.RestartNow
				}
				return restart(dir, mode, stdout, stderr)
			}
		},
	},
	"clear-stale": {
		synopsis: "clear-stale [--dir DIR]\n\nClear what a dead runner left (its record, its identity in the lock file,\na restart request addressed to it), holding the lock while it does.",
		exits:    "0 cleared, or nothing was stale; 75 a runner holds the directory; 1\nerror; 2 usage.",
		flags: func(*flag.FlagSet) func(string, io.Writer, io.Writer) int {
			return clearStale
		},
	},
	"wait": {
		synopsis: "wait [--dir DIR] [--timeout D]\n\nWait until no runner holds the directory (it released, or died).",
		exits:    "0 no runner holds it; 75 a runner, or the orphans of a previous\nrunner's tree, still hold it when the timeout ends; 1 error; 2 usage;\n130 or 143 interrupted by SIGINT or SIGTERM.",
		flags: func(fs *flag.FlagSet) func(string, io.Writer, io.Writer) int {
			timeout := fs.Duration("timeout", 30*time.Second, "give up after this long (0: no limit)")
			return func(dir string, stdout, stderr io.Writer) int {
				if *timeout < 0 {
					return negativeTimeout("wait", *timeout, stderr)
				}
				return wait(dir, *timeout, stdout, stderr)
			}
		},
	},
	"stop": {
		synopsis: "stop [--dir DIR] [--drain|--now] [--timeout D]\n\nAsk the server of the directory to go (a restart request: --drain, the\ndefault, finishes what is in flight; --now stops at once) and wait until\nit has let the directory go (a successor may hold it by then). It never\nsignals.",
		exits:    "0 the server asked has let the directory go, or none held it; 75 it still\nholds it when the timeout ends; 1 error; 2 usage; 130 or 143 interrupted\nby SIGINT or SIGTERM (the request stays: the server still goes).",
		flags: func(fs *flag.FlagSet) func(string, io.Writer, io.Writer) int {
			drain := fs.Bool("drain", false, "finish what is in flight, then go (the default)")
			now := fs.Bool("now", false, "go at once")
			timeout := fs.Duration("timeout", 30*time.Second, "give up waiting after this long (0: no limit)")
			return func(dir string, stdout, stderr io.Writer) int {
				if *drain && *now {
					fmt.Fprintln(stderr, "runnerctl stop: give at most one of --drain and --now")
					return exitUsage
				}
				if *timeout < 0 {
					return negativeTimeout("stop", *timeout, stderr)
				}
				mode := runnerstate.RestartDrain
				if *now {
					mode = runnerstate.RestartNow
				}
				return stop(dir, mode, *timeout, stdout, stderr)
			}
		},
	},
	"start": {
		synopsis: "start [--dir DIR] [--timeout D] [--json] -- CMD [ARGS...]\n\nMake sure a runner of the directory runs and is ready: when none is, start\nCMD detached (its output appended to DIR/runner.log) and wait until it has\npublished its record; concurrent starts share one attempt. A runner asked\nto restart is leaving: start waits for it to go, then starts CMD. Print the\nready runner's record.",
		exits:    "0 a runner is ready; 1 the runner started did not become ready (its log\ntail is printed), or another error; 2 usage; 130 or 143 interrupted by\nSIGINT or SIGTERM. On a timeout or an interruption the runner started is\nleft running (it may just be slow): a later start waits for it.",
		rest:     true,
		flags: func(fs *flag.FlagSet) func(string, io.Writer, io.Writer) int {
			timeout := fs.Duration("timeout", time.Minute, "give up waiting after this long (0: no limit); the runner is left to finish")
			asJSON := fs.Bool("json", false, "print the record as JSON")
			return func(dir string, stdout, stderr io.Writer) int {
				if fs.NArg() == 0 {
					fmt.Fprintln(stderr, "runnerctl start: name the command to start after --: runnerctl start --dir DIR -- CMD [ARGS...]")
					return exitUsage
				}
				if *timeout < 0 {
					return negativeTimeout("start", *timeout, stderr)
				}
				return start(dir, *timeout, *asJSON, fs.Args(), stdout, stderr)
			}
		},
	},
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "help":
		if len(args) > 1 {
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	name, args := args[0], args[1:]
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "runnerctl: unknown command %s\n\n%s", printable(name), usage)
		return exitUsage
	}
	fs := flag.NewFlagSet("runnerctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", demodir.Dir("runnerstate-demo"), "the runner directory")
	do := c.flags(fs)
	// The flag package prints the usage itself, to its output, before it
	// returns: help goes to stdout (asked for, exit 0), a mistake to stderr
	// with one line pointing at the help.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: runnerctl %s\n\nflags:\n", c.synopsis)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			fmt.Fprintf(stdout, "\nexit codes: %s\n", c.exits)
			return exitOK
		}
		synopsis, _, _ := strings.Cut(c.synopsis, "\n")
		fmt.Fprintf(stderr, "usage: runnerctl %s (runnerctl %s --help for more)\n", synopsis, name)
		return exitUsage
	}
	if fs.NArg() > 0 && !c.rest {
		fmt.Fprintf(stderr, "runnerctl %s: unexpected argument %s\n", name, printable(fs.Arg(0)))
		return exitUsage
	}
	if *dir == "" {
		fmt.Fprintf(stderr, "runnerctl %s: --dir is empty; name a directory (. for the current one)\n", name)
		return exitUsage
	}
	return do(*dir, stdout, stderr)
}

func status(dir string, asJSON bool, stdout, stderr io.Writer) int {
	looked := time.Now()
	r, err := runnerstate.Status(dir)
	if err != nil {
		fail(stderr, err)
		return exitUnknown
	}
	code := exitNotRunning
	_, _, rerr := runnerstate.Running(dir)
	switch {
	case errors.Is(rerr, runnerstate.ErrLockingUnsupported):
		code = exitUnknown // a lock that cannot exclude cannot tell "not running"
	case errors.Is(rerr, runnerstate.ErrUntrustedDir):
		code = exitUnknown // what other users can write proves nothing
	case r.Held:
		code = exitOK
	case len(r.Orphans) > 0:
		code = exitBusy
	}
	if asJSON {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && !r.Held {
			r.Warnings = append(r.Warnings, dir+": no such directory (is --dir mistyped?)")
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fail(stderr, err)
			return exitUnknown
		}
		return code
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("dir", printable(r.Dir))
	switch _, err := os.Stat(dir); {
	case code == exitUnknown && errors.Is(rerr, runnerstate.ErrUntrustedDir):
		row("runner", "cannot tell: other users can write this directory (see warnings)")
	case code == exitUnknown:
		row("runner", "cannot tell: this filesystem's locks do not exclude (see warnings)")
	case errors.Is(err, fs.ErrNotExist) && !r.Held:
		row("runner", "none: no such directory (is --dir mistyped?)")
	default:
		row("runner", runnerWords(r))
	}
	if r.Filesystem != "" {
		row("filesystem", printable(r.Filesystem))
	}
	if r.Held && r.Verified && r.Holder.Process.PID != 0 {
		row("ready", readyWords(r.Holder))
	}
	if h := r.Holder; h.Program != "" || h.Version != "" {
		row("program", printable(strings.TrimSpace(h.Program+" "+h.Version)))
	}
	for i, ep := range r.Holder.Endpoints {
		row(first(i, "endpoints"), printable(ep.Network+" "+ep.Address))
	}
	if r.Starting.PID != 0 {
		row("starting", printable(r.Starting.String())+" (started by runnerctl start or runnerstate.Start, not yet ready)")
	}
	if e := r.LastExit; e != nil {
		who := "pid " + strconv.Itoa(e.Process.PID)
		if e.Program != "" {
			who += " (" + printable(strings.TrimSpace(e.Program+" "+e.Version)) + ")"
		}
		when := fmt.Sprintf("%s (%s ago)", e.Gone.Format(time.RFC3339), time.Since(e.Gone).Round(time.Second))
		switch {
		case e.How != "unknown":
			when = "ended " + when
		case !e.Gone.Before(looked):
			// Found by this look (nothing recorded it before): when it
			// ended is not known, only that it is gone now.
			when = "found gone now, when it ended is not known"
		default:
			when = "found gone " + when
		}
		row("last exit", fmt.Sprintf("%s: %s, %s", who, printable(e.How), when))
		for _, l := range e.Log {
			row("", "| "+printable(l))
		}
	}
	if r.StartFailures > 0 {
		row("start failures", strconv.Itoa(r.StartFailures)+" in a row (processes started that went away before they were ready)")
	}
	if !r.NextStart.IsZero() {
		row("next start", fmt.Sprintf("not before %s (in %s): consecutive failures hold every start back", r.NextStart.Format(time.RFC3339Nano), max(0, time.Until(r.NextStart)).Round(time.Millisecond)))
	}
	if r.Held && r.Verified && !r.Holder.StartedAt.IsZero() {
		row("started", fmt.Sprintf("%s (%s ago)", r.Holder.StartedAt.Format(time.RFC3339), time.Since(r.Holder.StartedAt).Round(time.Second)))
		if r.Holder.MaxParallel > 0 {
			row("max parallel", strconv.Itoa(r.Holder.MaxParallel))
		}
		if len(r.Holder.Specs) > 0 {
			specs := make([]string, len(r.Holder.Specs))
			for i, s := range r.Holder.Specs {
				specs[i] = printable(s)
			}
			row("specs", strings.Join(specs, ", "))
		}
		if r.Holder.Process.Hostname != "" {
			row("host", printable(r.Holder.Process.Hostname))
		}
	}
	restart := r.Restart
	if restart == "" {
		restart = "none"
	}
	row("restart", restart)
	if l := r.Lingering; l != nil {
		row("lingering", lingeringWords(*l))
	}
	for i, w := range r.Waiting {
		row(first(i, "waiting"), printable(w.String()))
	}
	if len(r.Orphans) > 0 {
		row("orphans", pidWords(r.Orphans)+" (a previous runner's tree: the directory stays busy until they exit)")
	}
	if len(r.Stale) > 0 {
		row("stale pids", pidWords(r.Stale))
	}
	for i, w := range r.Warnings {
		row(first(i, "warnings"), prose(w))
	}
	tw.Flush()
	return code
}

// runnerWords says who holds the directory in words that never contradict
// each other: "verified alive" only for a verified holder, and for any other
// holder what is known of it, with the reason among the warnings.
func runnerWords(r runnerstate.Report) string {
	switch {
	case !r.Held:
		return "none"
	case r.Verified:
		return fmt.Sprintf("pid %d, verified alive", r.Holder.PID)
	case r.Holder.PID == 0 && r.Verdict == "other-namespace":
		return "held by a runner of another PID namespace, not visible from this one: never signalled"
	case r.Holder.PID == 0:
		return "held by a process that cannot be named from here (see warnings)"
	case r.Verdict == "foreign":
		return fmt.Sprintf("pid %d, on another machine: never signalled", r.Holder.PID)
	case r.Verdict == "other-namespace":
		return fmt.Sprintf("pid %d, in another PID namespace: never signalled", r.Holder.PID)
	}
	return fmt.Sprintf("pid %d, not verified (see warnings)", r.Holder.PID)
}

// lingeringWords describes a server that handed the directory over and
// still serves the connections it had accepted.
func lingeringWords(l runnerstate.Lingering) string {
	w := fmt.Sprintf("pid %d, serving %d open connection(s) until %s (in %s), killed after %s",
		l.Holder.PID, l.Open, l.Deadline.Format(time.RFC3339), max(0, time.Until(l.Deadline)).Round(time.Second), l.KillAt.Format(time.RFC3339))
	if l.End == runnerstate.LingerEndNow {
		w += "; asked to end now"
	}
	if l.Retaking {
		w += "; retaking the directory (its successor failed)"
	}
	return w
}

func pidWords(pids []int) string {
	words := make([]string, len(pids))
	for i, p := range pids {
		words[i] = strconv.Itoa(p)
	}
	return strings.Join(words, " ")
}

func first(i int, key string) string {
	if i == 0 {
		return key
	}
	return ""
}

func restart(dir, mode string, stdout, stderr io.Writer) int {
	r, err := runnerstate.Status(dir)
	if err != nil {
		fail(stderr, err)
		return exitError
	}
	if !r.Held {
		fmt.Fprintf(stderr, "runnerctl: no runner holds %s; nothing to restart\n", printable(r.Dir))
		return exitNotRunning
	}
	if err := runnerstate.RequestRestart(dir, mode); err != nil {
		fail(stderr, err)
		return exitError
	}
	pending, _ := runnerstate.RestartRequested(dir)
	who := "the runner"
	if r.Holder.PID > 0 {
		who = "pid " + strconv.Itoa(r.Holder.PID)
	}
	if pending == "" {
		pending = "none: the runner has taken it already"
	}
	fmt.Fprintf(stdout, "restart requested: %s (pending: %s) for %s\n", mode, pending, who)
	return exitOK
}

func clearStale(dir string, stdout, stderr io.Writer) int {
	pid, cleared, err := runnerstate.ClearStale(dir)
	var be *runnerstate.BusyError
	switch {
	case errors.As(err, &be) && be.Orphan:
		fmt.Fprintf(stderr, "runnerctl: no runner runs, but the orphans of a previous one do (pid %d); nothing is cleared while they hold the directory: %s\n", pid, prose(err.Error()))
		return exitBusy
	case errors.As(err, &be):
		fmt.Fprintf(stderr, "runnerctl: a runner is running (pid %d); nothing is stale: %s\n", pid, prose(err.Error()))
		return exitBusy
	case err != nil:
		fail(stderr, err)
		return exitError
	case cleared && pid == 0:
		fmt.Fprintln(stdout, "cleared the leftovers of a previous runner (an unreadable record, set aside, names no pid)")
	case cleared:
		fmt.Fprintf(stdout, "cleared the leftovers of pid %d\n", pid)
	default:
		fmt.Fprintln(stdout, "nothing stale")
	}
	return exitOK
}

// negativeTimeout refuses a --timeout below zero, which would give up at once.
func negativeTimeout(cmd string, d time.Duration, stderr io.Writer) int {
	fmt.Fprintf(stderr, "runnerctl %s: --timeout %v is negative: give a duration (30s, 2m), or 0 for no limit\n", cmd, d)
	return exitUsage
}

// within is the context of a wait bounded by timeout; 0 is no limit.
func within(timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout == 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), timeout)
}

func wait(dir string, timeout time.Duration, stdout, stderr io.Writer) int {
	ctx, cancel := within(timeout)
	defer cancel()
	res, err := runnerstate.Standby(ctx, dir, runnerstate.StandbyOptions{})
	if err != nil {
		fail(stderr, err)
		if errors.Is(err, runnerstate.ErrBusy) {
			return exitBusy
		}
		return exitError
	}
	if res.PreviousOwnerPID != 0 {
		fmt.Fprintf(stdout, "runner pid %d is gone\n", res.PreviousOwnerPID)
	} else {
		fmt.Fprintln(stdout, "no runner")
	}
	return exitOK
}

// stop asks the server of dir to go, in mode, and waits until it has let
// dir go (daemon.Stop).
func stop(dir, mode string, timeout time.Duration, stdout, stderr io.Writer) int {
	rec, held, err := runnerstate.Running(dir)
	if err != nil {
		fail(stderr, err)
		return exitError
	}
	if !held {
		note := ""
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			note = " (no such directory: is --dir mistyped?)"
		}
		fmt.Fprintln(stdout, "no server holds", printable(dir)+note+"; nothing to stop")
		return exitOK
	}
	who := "the server"
	if rec.PID != 0 {
		who = fmt.Sprintf("the server (pid %d)", rec.PID)
	}
	ctx, interrupted, stopWaiting := interruptible(timeout)
	defer stopWaiting()
	fmt.Fprintf(stdout, "asking %s to go (%s)\n", who, mode)
	err = daemon.Stop(ctx, dir, mode)
	sig := interrupted()
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "%s has let %s go\n", who, printable(dir))
		return exitOK
	case sig != nil:
		fmt.Fprintf(stderr, "runnerctl stop: interrupted (%v); the request stays, and %s still goes\n", sig, who)
		return signalExit(sig)
	case errors.Is(err, context.DeadlineExceeded):
		fail(stderr, err)
		return exitBusy
	}
	fail(stderr, err)
	return exitError
}

func fail(stderr io.Writer, err error) {
	fmt.Fprintln(stderr, "runnerctl:", prose(err.Error()))
}

// printable returns s as it is when every rune in it prints as itself, and
// otherwise quoted with Go's escapes (\n, \x1b, \u200b...), so that a path
// holding a newline or a terminal escape can neither break the table nor
// fake a line of it. A backslash is quoted too, so that a name cannot fake
// an escape, except where it is the path separator (Windows): there every
// path has them, and no file name can hold a control character to escape.
func printable(s string) string {
	if strings.ContainsRune(s, '"') || (filepath.Separator != '\\' && strings.ContainsRune(s, '\\')) {
		return strconv.QuoteToGraphic(s)
	}
	return prose(s)
}

// prose is printable for text of the library's own that quotes paths itself
// (errors, warnings) and for a record's JSON: quotes and backslashes are
// its own and are left as they are; it is quoted whole only when it holds
// a control character, an invalid byte or a space other than ' '.
func prose(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsGraphic(r) || (unicode.IsSpace(r) && r != ' ') {
			return strconv.QuoteToGraphic(s)
		}
	}
	return s
}

func readyWords(rec runnerstate.Record) string {
	switch {
	case rec.Leaving != "":
		return "no: leaving (" + printable(rec.Leaving) + "); a start waits for it to go, then starts a new runner"
	case rec.Ready:
		return "yes (it has published its record)"
	}
	return "not yet (admitted, its record not yet published)"
}

// interruptible is a context for a wait of at most timeout (0: no limit)
// that SIGINT or SIGTERM also ends; interrupted says which signal ended it
// (nil when none did); stop lets the signals go.
func interruptible(timeout time.Duration) (ctx context.Context, interrupted func() os.Signal, stop func()) {
	ctx, cancel := within(timeout)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	got := make(chan os.Signal, 1)
	go func() {
		select {
		case sig := <-sigs:
			got <- sig // before the cancel that ends the wait
			cancel()
		case <-ctx.Done():
		}
	}()
	interrupted = func() os.Signal {
		select {
		case sig := <-got:
			got <- sig
			return sig
		default:
			return nil
		}
	}
	return ctx, interrupted, func() { signal.Stop(sigs); cancel() }
}

// signalExit is the exit code of a process ended by sig: 128 + its number.
func signalExit(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitError
}

// start makes sure a runner of dir is ready, starting argv when none is.
func start(dir string, timeout time.Duration, asJSON bool, argv []string, stdout, stderr io.Writer) int {
	// SIGINT or SIGTERM ends the wait, not the runner: say which one is
	// left running, and exit as the signal would have (130, 143).
	ctx, interrupted, stopWaiting := interruptible(timeout)
	defer stopWaiting()
	rec, err := runnerstate.Start(ctx, dir, exec.Command(argv[0], argv[1:]...), runnerstate.StartOptions{})
	var se *runnerstate.StartError
	sig := interrupted()
	switch {
	case sig != nil && errors.As(err, &se) && se.PID > 0 && se.ExitCode < 0:
		fmt.Fprintf(stderr, "runnerctl start: interrupted (%v); the runner started, pid %d, is left running, not yet ready: a later start waits for it (its output: %s)\n", sig, se.PID, printable(se.Log))
		return signalExit(sig)
	case sig != nil && err != nil:
		fail(stderr, err)
		return signalExit(sig)
	case errors.As(err, &se):
		fail(stderr, err)
		if se.LogTail != "" {
			fmt.Fprintf(stderr, "last lines of %s:\n", printable(se.Log))
			for _, line := range strings.Split(strings.TrimSuffix(se.LogTail, "\n"), "\n") {
				fmt.Fprintln(stderr, printable(line))
			}
		}
		return exitError
	case err != nil:
		fail(stderr, err)
		return exitError
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rec); err != nil {
			fail(stderr, err)
			return exitError
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ready", printable(rec.Process.String()))
	row("started", rec.StartedAt.Format(time.RFC3339))
	if len(rec.Meta) > 0 {
		row("meta", prose(string(rec.Meta)))
	}
	tw.Flush()
	return exitOK
}
