// Command runner is a demo daemon built on runnerstate: it enters its
// directory through Takeover (asking a runner already there to restart, and
// escalating to signals only when that runner is verified), publishes its
// record, and runs fake jobs until it is asked to stop.
//
//	go run ./examples/runner                 # dir $TMPDIR/runnerstate-demo-<uid>, 2 s jobs, 2 at a time
//	go run ./examples/runner -job 500ms -parallel 4 -jobs 10
//
// Each job is a process of the runner's tree (runnerstate.Inherit), so that a
// runner killed with kill -9 leaves no job running beside its successor.
// It honours restart requests (runnerctl restart --drain finishes the running
// jobs and takes no new one; --now stops at once), RestartLost (its lock file
// was deleted or replaced: it warns, stops at once and exits 72) and SIGTERM
// (exit 143).
// With -mode drain (and no -grace) it takes over by a real drain: the runner
// already there finishes its running jobs, however long they take, and is
// never signalled; -wait bounds the wait. A job ends early, as finished, on
// SIGUSR1 (kill -USR1 <job pid>), to try that without waiting.
// Refused (a runner it may not signal holds the directory, or a newer starter
// won), it exits with runnerstate.ExitBusy (75).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/examples/internal/demodir"
)

// exitLost is the exit code of a runner that stopped because a lock file of
// its hold was deleted or replaced (RestartLost): 72, EX_OSFILE, "a critical
// file is missing". Its record is removed only while it still names it.
const exitLost = 72

// usage is the runner's --help, before its flags.
const usage = `usage: runner [flags]

Run fake jobs as the one runner of a directory: take it over from a runner
already there (ask it to restart; signal it only when it is verified and
does not go), publish a record, and stop when asked.

exit codes: 0 stopped when asked (runnerctl restart, a takeover) or after
-jobs jobs; 1 error; 2 usage; 72 a lock file was deleted or replaced while
it ran (it stops at once); 75 refused: a runner it may not signal holds the
directory, or a newer starter won (runnerstate.ExitBusy); 130 SIGINT
(Ctrl-C); 143 SIGTERM.

flags:
`

func main() {
	if len(os.Args) == 3 && os.Args[1] == jobProcessFlag {
		os.Exit(jobProcess(os.Args[2]))
	}
	os.Exit(run())
}

func run() int {
	dir := flag.String("dir", demodir.Dir("runnerstate-demo"), "the runner directory")
	job := flag.Duration("job", 2*time.Second, "how long each fake job runs")
	parallel := flag.Int("parallel", 2, "how many jobs run at once")
	jobs := flag.Int("jobs", 0, "stop after this many jobs (0: run until asked to stop)")
	mode := flag.String("mode", runnerstate.RestartNow, "what to ask a runner already there: now or drain")
	grace := flag.Duration("grace", 0, "how long a runner already there has to stop before SIGTERM (0: 5s with -mode now; with -mode drain, wait for its drain until -wait ends)")
	killAfter := flag.Duration("kill-after", runnerstate.DefaultKillAfter, "how long after SIGTERM before SIGKILL")
	noSignal := flag.Bool("no-signal", false, "never signal a runner already there; only ask")
	wait := flag.Duration("wait", time.Minute, "how long to wait to be admitted")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	if helpAsked(os.Args[1:]) {
		flag.CommandLine.SetOutput(os.Stdout) // asked for, it is the output (runner --help | less); a usage error stays on stderr
	}
	flag.Parse()
	if msg := badFlags(*parallel, *jobs, *mode, flag.Args()); msg != "" {
		fmt.Fprintln(os.Stderr, "runner:", msg)
		return 2
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("self", os.Getpid())
	runnerstate.SetLogger(log)

	// SIGTERM and SIGINT end the runner at any moment: while it waits to be
	// admitted, while it is being admitted, and while it runs.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	start := time.Now()
	release, sig, err := admit(*dir, *wait, sigs, runnerstate.TakeoverOptions{
		Mode: *mode, Grace: *grace, KillAfter: *killAfter, NoSignal: *noSignal, Logger: log,
	})
	if sig != nil {
		// Admitted or not, a signal that came while Takeover worked is
		// obeyed as if it had come a moment later.
		if err == nil {
			release()
		}
		log.Info("signalled while waiting to be admitted; stopping", "signal", sig.String())
		return exitCode(sig)
	}
	if err != nil {
		log.Error("not admitted", "dir", *dir, "err", err)
		if errors.Is(err, runnerstate.ErrBusy) || errors.Is(err, runnerstate.ErrSuperseded) {
			return runnerstate.ExitBusy
		}
		return 1
	}
	defer release()
	log.Info("admitted", "dir", *dir, "after", time.Since(start).Round(time.Millisecond))
	hint(*dir)

	meta, _ := json.Marshal(map[string]any{"job_seconds": job.Seconds()})
	if err := runnerstate.Publish(*dir, runnerstate.Record{
		MaxParallel: *parallel, Specs: []string{"demo-job"}, Meta: meta,
	}); err != nil {
		log.Error("publish", "err", err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restarts := runnerstate.WatchRestart(ctx, *dir)

	var wg sync.WaitGroup
	slots := make(chan struct{}, *parallel)
	jobCtx, stopJobs := context.WithCancel(ctx)
	defer stopJobs()
	draining := false
	started := 0
	exit := 0
	for !draining {
		if *jobs > 0 && started >= *jobs {
			break
		}
		select {
		case slots <- struct{}{}:
			started++
			n := started
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				runJob(jobCtx, log, *dir, n, *job)
			}()
			continue
		case mode := <-restarts:
			if mode == runnerstate.RestartLost {
				log.Warn("lock file lost; stopping at once", "dir", *dir, "exit", exitLost)
				exit = exitLost
			} else {
				log.Info("restart requested", "mode", mode)
			}
			if mode != runnerstate.RestartDrain {
				stopJobs() // now, or lost: another runner may be admitted beside this one
			}
			draining = true
		case sig := <-sigs:
			log.Info("signalled; stopping", "signal", sig.String())
			stopJobs()
			draining = true
			exit = exitCode(sig)
		}
	}
	// Drain: no new job; the running ones finish (or were cancelled). A
	// "now" or a signal while draining stops them at once.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			log.Info("stopped", "jobs", started)
			return exit
		case mode := <-restarts:
			if mode == runnerstate.RestartLost {
				log.Warn("lock file lost while draining; stopping at once", "dir", *dir, "exit", exitLost)
				exit = exitLost
			} else if mode != runnerstate.RestartDrain {
				log.Info("restart requested while draining", "mode", mode)
			}
			if mode != runnerstate.RestartDrain {
				stopJobs()
			}
		case sig := <-sigs:
			log.Info("signalled while draining; stopping", "signal", sig.String())
			stopJobs()
			if exit != exitLost {
				exit = exitCode(sig)
			}
		}
	}
}

// admit runs Takeover with a context that ends after wait or at the first
// signal on sigs. sig is that signal when one came before admit returned:
// Takeover never admits once its context has ended, but the signal can also
// come in the instant after it returns, so the caller must look at sig
// whether err is nil or not. A signal that comes after admit returns stays
// in sigs for the caller.
func admit(dir string, wait time.Duration, sigs <-chan os.Signal, opts runnerstate.TakeoverOptions) (release func(), sig os.Signal, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	got := make(chan os.Signal, 1)
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigs:
			got <- s
			cancel()
		case <-done:
		}
	}()
	release, err = runnerstate.Takeover(ctx, dir, opts)
	close(done)
	<-watched
	select {
	case sig = <-got:
	default:
	}
	return release, sig, err
}

// exitCode is how a process killed by sig exits, by the shell's convention.
func exitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// hint tells a newcomer what to try next, once, on standard error. The
// directory is quoted for a POSIX shell (shellQuote), so that a line can be
// pasted as it is.
func hint(dir string) {
	flag := ""
	if dir != demodir.Dir("runnerstate-demo") {
		flag = " --dir " + shellQuote(dir)
	}
	fmt.Fprintf(os.Stderr, "\nThis runner holds %s. Try, in another terminal at the root of the runnerstate repository (each command line pastes as it is):\n"+
		"  who runs here, and is it verified:\n    go run ./examples/runnerctl status%s\n"+
		"  a second runner takes over from this one:\n    go run ./examples/runner%s\n"+
		"  it finishes its jobs, then exits:\n    go run ./examples/runnerctl restart --drain%s\n"+
		"Stop it with Ctrl-C.\n\n", shellQuote(dir), flag, flag, flag)
}

// badFlags says what is wrong with the flags a runner was given, before it
// takes the directory; "" when nothing is.
func badFlags(parallel, jobs int, mode string, args []string) string {
	switch {
	case len(args) > 0:
		return fmt.Sprintf("unexpected argument %q: every setting is a flag (see --help)", args[0])
	case parallel < 1:
		return fmt.Sprintf("-parallel %d: give at least 1 job at once", parallel)
	case jobs < 0:
		return fmt.Sprintf("-jobs %d: give a number of jobs, or 0 to run until asked to stop", jobs)
	case mode != runnerstate.RestartNow && mode != runnerstate.RestartDrain:
		return fmt.Sprintf("-mode %q: give now or drain", mode)
	}
	return ""
}

// shellQuote quotes s as one word for a POSIX shell: as it is when it is
// made of characters no shell treats specially; in single quotes otherwise
// (a ' inside closes the quotes, is escaped with \, and opens them
// again); and, when s holds a control character or bytes
// that are not UTF-8, which a terminal would act on or a paste would break,
// as $'...' with escapes (bash, zsh, ksh and POSIX.1-2024 sh read it).
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-+,:@%=") == "" {
		return s
	}
	plain := utf8.ValidString(s)
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			plain = false
		}
	}
	if plain {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '!': // never a history expansion, in any shell's mood
			b.WriteString(`\x21`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case !unicode.IsPrint(r) && r != ' ':
			for _, c := range []byte(s[i : i+n]) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		default:
			b.WriteRune(r)
		}
		i += n
	}
	b.WriteString("'")
	return b.String()
}

// runJob runs one fake job, for d, as a process of the runner's tree
// (runnerstate.Inherit): the directory stays busy while it runs, even if the
// runner is killed, and the next runner's Takeover stops it. When ctx ends
// first, the job gets SIGTERM.
func runJob(ctx context.Context, log *slog.Logger, dir string, n int, d time.Duration) {
	cmd := exec.Command(os.Args[0], jobProcessFlag, d.String())
	cmd.Stderr = os.Stderr
	switch err := runnerstate.Inherit(dir, cmd); {
	case errors.Is(err, errors.ErrUnsupported):
		// Windows: no tree lock to hand on; the job is a plain child.
	case err != nil:
		log.Error("job not started", "job", n, "err", err)
		return
	}
	if err := cmd.Start(); err != nil {
		log.Error("job not started", "job", n, "err", err)
		return
	}
	log.Info("job started", "job", n, "pid", cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		log.Info("job finished", "job", n)
	case <-ctx.Done():
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		log.Info("job cancelled", "job", n)
	}
}

// jobProcessFlag makes the runner's binary play one of its own jobs.
const jobProcessFlag = "-job-process"

// jobProcess is a job's process: it works (sleeps) for d, or until SIGTERM.
// A finishSignal (SIGUSR1 on Unix: kill -USR1 <job pid>) ends it early as
// finished, to try a drain without waiting for a long job.
func jobProcess(d string) int {
	dur, err := time.ParseDuration(d)
	if err != nil {
		fmt.Fprintln(os.Stderr, "job:", err)
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	finish := make(chan os.Signal, 1)
	if finishSignal != nil {
		signal.Notify(finish, finishSignal)
	}
	select {
	case <-time.After(dur):
		return 0
	case <-finish:
		return 0
	case sig := <-sigs:
		return exitCode(sig)
	}
}

// helpAsked reports whether args ask for the help (-h, -help, --help)
// before any "--".
func helpAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help", "--h":
			return true
		}
	}
	return false
}
