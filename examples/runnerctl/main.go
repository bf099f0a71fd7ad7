// Command runnerctl shows and steers the runner of a directory.
//
//	runnerctl status [--json]          who runs there, verified or not, and what waits
//	runnerctl restart --drain|--now    ask the runner to restart
//	runnerctl clear-stale              clear a dead runner's leftovers
//	runnerctl wait [--timeout 30s]     wait until no runner holds the directory
//
// Every command takes --dir (default $TMPDIR/runnerstate-demo, the demo
// runner's). Exit codes: 0 done; 1 error; 2 usage; 75 (runnerstate.ExitBusy)
// refused because a runner holds the directory, or a wait timed out.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/runnerstate/runnerstate"
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

every command takes --dir DIR (default $TMPDIR/runnerstate-demo)
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("runnerctl "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", filepath.Join(os.TempDir(), "runnerstate-demo"), "the runner directory")
	var asJSON, drain, now *bool
	var timeout *time.Duration
	switch cmd {
	case "status":
		asJSON = fs.Bool("json", false, "print the report as JSON")
	case "restart":
		drain = fs.Bool("drain", false, "finish the running jobs, take no new one, then exit")
		now = fs.Bool("now", false, "exit at once")
	case "clear-stale":
	case "wait":
		timeout = fs.Duration("timeout", 30*time.Second, "give up after this long")
	default:
		fmt.Fprintf(stderr, "runnerctl: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "runnerctl %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2
	}
	switch cmd {
	case "status":
		return status(*dir, *asJSON, stdout, stderr)
	case "restart":
		if *drain == *now {
			fmt.Fprintln(stderr, "runnerctl restart: give exactly one of --drain and --now")
			return 2
		}
		mode := runnerstate.RestartDrain
		if *now {
			mode = runnerstate.RestartNow
		}
		return restart(*dir, mode, stdout, stderr)
	case "clear-stale":
		return clearStale(*dir, stdout, stderr)
	default:
		return wait(*dir, *timeout, stdout, stderr)
	}
}

func status(dir string, asJSON bool, stdout, stderr io.Writer) int {
	r, err := runnerstate.Status(dir)
	if err != nil {
		fmt.Fprintln(stderr, "runnerctl:", err)
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(stderr, "runnerctl:", err)
			return 1
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("dir", r.Dir)
	switch {
	case !r.Held:
		row("runner", "none")
	case r.Verified:
		row("runner", fmt.Sprintf("pid %d (verified alive)", r.Holder.PID))
	case r.Holder.PID > 0 && r.Verdict != "":
		row("runner", fmt.Sprintf("pid %d (unverified: %s)", r.Holder.PID, r.Verdict))
	case r.Holder.PID > 0:
		row("runner", fmt.Sprintf("pid %d (unverified: the lock file names no holder)", r.Holder.PID))
	default:
		row("runner", "held by a process that cannot be named")
	}
	if r.Held && r.Verified && !r.Holder.StartedAt.IsZero() {
		row("started", fmt.Sprintf("%s (%s ago)", r.Holder.StartedAt.Format(time.RFC3339), time.Since(r.Holder.StartedAt).Round(time.Second)))
		if r.Holder.MaxParallel > 0 {
			row("max parallel", fmt.Sprint(r.Holder.MaxParallel))
		}
		if len(r.Holder.Specs) > 0 {
			row("specs", strings.Join(r.Holder.Specs, ", "))
		}
		if r.Holder.Process.Hostname != "" {
			row("host", r.Holder.Process.Hostname)
		}
	}
	restart := r.Restart
	if restart == "" {
		restart = "none"
	}
	row("restart", restart)
	for i, w := range r.Waiting {
		k := ""
		if i == 0 {
			k = "waiting"
		}
		row(k, w.String())
	}
	if len(r.Stale) > 0 {
		row("stale pids", strings.Trim(fmt.Sprint(r.Stale), "[]"))
	}
	for i, w := range r.Warnings {
		k := ""
		if i == 0 {
			k = "warnings"
		}
		row(k, w)
	}
	tw.Flush()
	return 0
}

func restart(dir, mode string, stdout, stderr io.Writer) int {
	r, err := runnerstate.Status(dir)
	if err != nil {
		fmt.Fprintln(stderr, "runnerctl:", err)
		return 1
	}
	if !r.Held {
		fmt.Fprintf(stderr, "runnerctl: no runner holds %s; nothing to restart\n", r.Dir)
		return 1
	}
	if err := runnerstate.RequestRestart(dir, mode); err != nil {
		fmt.Fprintln(stderr, "runnerctl:", err)
		return 1
	}
	pending, _ := runnerstate.RestartRequested(dir)
	fmt.Fprintf(stdout, "restart requested: %s (pending: %s) for pid %d\n", mode, pending, r.Holder.PID)
	return 0
}

func clearStale(dir string, stdout, stderr io.Writer) int {
	pid, cleared, err := runnerstate.ClearStale(dir)
	var be *runnerstate.BusyError
	switch {
	case errors.As(err, &be):
		fmt.Fprintf(stderr, "runnerctl: a runner is running (pid %d); nothing is stale: %v\n", pid, err)
		return runnerstate.ExitBusy
	case err != nil:
		fmt.Fprintln(stderr, "runnerctl:", err)
		return 1
	case cleared:
		fmt.Fprintf(stdout, "cleared the leftovers of pid %d\n", pid)
	default:
		fmt.Fprintln(stdout, "nothing stale")
	}
	return 0
}

func wait(dir string, timeout time.Duration, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := runnerstate.Standby(ctx, dir, runnerstate.StandbyOptions{})
	if err != nil {
		fmt.Fprintln(stderr, "runnerctl:", err)
		if errors.Is(err, runnerstate.ErrBusy) {
			return runnerstate.ExitBusy
		}
		return 1
	}
	if res.PreviousOwnerPID != 0 {
		fmt.Fprintf(stdout, "runner pid %d is gone\n", res.PreviousOwnerPID)
	} else {
		fmt.Fprintln(stdout, "no runner")
	}
	return 0
}
