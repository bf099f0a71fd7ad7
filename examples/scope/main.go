// Command scope is a demo server built on runnerstate: one server per scope
// directory, and one server per data dir. It takes its scope (AcquireScope),
// then its data dir (Lock on <data>/server.lock), serves until SIGTERM or
// SIGINT, finishes its teardown and only then releases the data dir and the
// scope.
//
//	go run ./examples/scope -data /tmp/a      # serves /tmp/a in scope $TMPDIR/runnerstate-scope-<uid>
//	go run ./examples/scope -data /tmp/b      # in another terminal: refused, names /tmp/a, exits 75
//
// Refused (another server holds the scope, or the data dir), it prints which
// data dir the other server serves and exits with runnerstate.ExitBusy (75).
// By default it asks once; -wait makes it wait that long for the other server
// to go. A clean shutdown on SIGTERM or SIGINT exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/examples/internal/demodir"
)

func main() {
	os.Exit(run())
}

func run() int {
	scopeDir := flag.String("scope", demodir.Dir("runnerstate-scope"), "the scope directory shared by would-be servers")
	dataDir := flag.String("data", demodir.Dir("runnerstate-scope-data"), "the data dir this server serves (created if needed)")
	wait := flag.Duration("wait", 0, "how long to wait for the scope and the data dir to be free (0: ask once)")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("pid", os.Getpid())
	runnerstate.SetLogger(log)

	// SIGTERM and SIGINT end the server, and a wait to be admitted too.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var admit context.Context
	var cancelAdmit context.CancelFunc
	if *wait > 0 {
		admit, cancelAdmit = context.WithTimeout(ctx, *wait)
	} else {
		// An ended context: AcquireScope and Lock make one try and do
		// not wait.
		admit, cancelAdmit = context.WithCancel(ctx)
		cancelAdmit()
	}
	defer cancelAdmit()
	start := time.Now()

	// 1. The scope first.
	releaseScope, err := runnerstate.AcquireScope(admit, *scopeDir, *dataDir)
	if err != nil {
		return refused(ctx, log, "scope", *scopeDir, err)
	}
	// 2. Then the data dir. Refused here, the scope is let go before exiting:
	// a scope held by a server that serves nothing would turn others away.
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		releaseScope()
		log.Error("data dir", "err", err)
		return 1
	}
	unlock, err := runnerstate.Lock(admit, filepath.Join(*dataDir, "server.lock"))
	if err != nil {
		releaseScope()
		return refused(ctx, log, "data dir", *dataDir, err)
	}
	cancelAdmit()
	log.Info("serving", "scope", *scopeDir, "data", *dataDir, "after", time.Since(start).Round(time.Millisecond))
	fmt.Printf("serving %s in scope %s\n", *dataDir, *scopeDir)

	<-ctx.Done()
	log.Info("signalled; stopping")
	// 3. Teardown first (here: nothing to close), release last, data dir then
	// scope, so a successor admitted by the release never meets this server's
	// leftovers.
	teardown(log)
	unlock()
	releaseScope()
	log.Info("stopped")
	return 0
}

// teardown is where a real server stops accepting, finishes its requests,
// flushes and closes its files and stops its children.
func teardown(log *slog.Logger) {
	log.Info("teardown finished")
}

// refused explains a refusal and returns the exit code: ExitBusy when another
// server holds what was asked for.
func refused(ctx context.Context, log *slog.Logger, what, path string, err error) int {
	var busy *runnerstate.BusyError
	switch {
	case ctx.Err() != nil:
		log.Info("signalled while waiting to be admitted", "err", err)
		return 1
	case !errors.As(err, &busy):
		log.Error("cannot take the "+what, "path", path, "err", err)
		return 1
	}
	if busy.PID == 0 && errors.Is(err, context.DeadlineExceeded) {
		// No holder named: the wait (-wait) ended first, perhaps while this
		// server was taking it; the library's words say which.
		fmt.Fprintf(os.Stderr, "refused: the wait for the %s %s ended first: %v\n", what, path, err)
		return runnerstate.ExitBusy
	}
	holder := "another server"
	if busy.PID > 0 {
		holder = fmt.Sprintf("another server (pid %d)", busy.PID)
	}
	switch {
	case what == "scope" && busy.Owner != "":
		fmt.Fprintf(os.Stderr, "refused: %s serves data dir %s in scope %s\n", holder, busy.Owner, path)
	case what == "scope":
		fmt.Fprintf(os.Stderr, "refused: %s holds scope %s (it does not say which data dir it serves)\n", holder, path)
	default:
		fmt.Fprintf(os.Stderr, "refused: %s serves data dir %s from another scope\n", holder, path)
	}
	return runnerstate.ExitBusy
}
