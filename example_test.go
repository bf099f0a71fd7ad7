//go:build unix || windows

package runnerstate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate"
)

// A runner takes its directory, says who it is, and lets go; anyone can ask
// who runs there meanwhile.
func ExampleAcquire() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)

	release, err := runnerstate.Acquire(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	runnerstate.Publish(dir, runnerstate.Record{MaxParallel: 2, Specs: []string{"index"}})

	rec, running, _ := runnerstate.Running(dir)
	fmt.Println("running:", running, "specs:", rec.Specs, "by me:", rec.PID == os.Getpid())

	_, err = runnerstate.Acquire(dir) // a second runner is refused, with the holder named
	fmt.Println("second runner busy:", errors.Is(err, runnerstate.ErrBusy))

	release()
	_, running, _ = runnerstate.Running(dir)
	fmt.Println("running:", running)
	// Output:
	// running: true specs: [index] by me: true
	// second runner busy: true
	// running: false
}

// Lock waits for a kernel lock until its context ends; the busy answer names
// the lock file and the reason the wait ended, and the holder as far as it
// is known (busy.PID: on Linux the kernel names it, this very process here;
// elsewhere a bare lock file's holder is unknown, 0).
func ExampleLock() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "index.lock")

	unlock, _ := runnerstate.TryLock(path)
	defer unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := runnerstate.Lock(ctx, path)
	var busy *runnerstate.BusyError
	fmt.Println(errors.As(err, &busy), errors.Is(err, context.DeadlineExceeded), busy.Path == path)
	// Output:
	// true true true
}

// A restart request never weakens a pending one.
func ExampleRequestRestart() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)

	runnerstate.RequestRestart(dir, runnerstate.RestartNow)
	runnerstate.RequestRestart(dir, runnerstate.RestartDrain) // "now" stays "now"
	mode, ok := runnerstate.RestartRequested(dir)
	fmt.Println(mode, ok)
	fmt.Println(runnerstate.RequestRestart(dir, "later"))
	// Output:
	// now true
	// runnerstate: restart mode must be "drain" or "now", not "later"
}
