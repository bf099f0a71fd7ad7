//go:build unix

package runnerstate_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate"
)

// This program is its own runner: run as "<program> serve <dir>", it
// serves dir instead of doing anything else.
func init() {
	if len(os.Args) == 3 && os.Args[1] == "serve" {
		os.Exit(serve(os.Args[2]))
	}
}

// serve is the runner of dir: it takes dir, says it is ready with Publish,
// and serves until it is asked to go (a restart request, which a Takeover
// leaves too).
func serve(dir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release, err := runnerstate.Takeover(ctx, dir, runnerstate.TakeoverOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer release()
	restarts := runnerstate.WatchRestart(ctx, dir)
	if err := runnerstate.Publish(dir, runnerstate.Record{Specs: []string{"example"}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-restarts // asked to go, or ctx ended: either way, go
	return 0
}

// Start is a client's call: it returns the ready runner of dir, and starts
// one, detached, when none runs. Concurrent Starts, from any process, share
// one start; a later Start finds the runner ready and starts nothing.
func ExampleStart() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer removeStarted(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cmd := exec.Command(os.Args[0], "serve", dir)
	rec, err := runnerstate.Start(ctx, dir, cmd, runnerstate.StartOptions{})
	if err != nil {
		fmt.Println(err) // a *StartError: the runner exited before it was ready, or ctx ended
		return
	}
	fmt.Println("ready:", rec.Ready, "specs:", rec.Specs, "the one started:", rec.PID == cmd.Process.Pid)

	again, err := runnerstate.Start(ctx, dir, exec.Command(os.Args[0], "serve", dir), runnerstate.StartOptions{})
	fmt.Println("again, the same runner:", again.PID == rec.PID, "error:", err)

	// The next runner takes over: the one started is asked to go, and has
	// exited when Takeover returns.
	release, err := runnerstate.Takeover(ctx, dir, runnerstate.TakeoverOptions{})
	fmt.Println("taken over:", err)
	if err == nil {
		release()
	}
	// Output:
	// ready: true specs: [example] the one started: true
	// again, the same runner: true error: <nil>
	// taken over: <nil>
}

// removeStarted removes dir, whose runner a Start of this process started:
// once that runner has exited, this process records its end in start.json,
// under start.lock, so dir is removed holding start.lock, and the record
// then finds dir gone rather than half removed.
func removeStarted(dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	unlock, err := runnerstate.Lock(ctx, filepath.Join(dir, "start.lock"))
	os.RemoveAll(dir)
	if err == nil {
		unlock()
	}
}
