//go:build unix || windows

package runnerstate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate"
)

// A runner starts with Takeover: admitted at once when no runner holds the
// directory, else after the previous runner has gone (asked first, signalled
// only when verified and the grace period ends). The admitted process holds
// the directory until release.
func ExampleTakeover() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release, err := runnerstate.Takeover(ctx, dir, runnerstate.TakeoverOptions{Mode: runnerstate.RestartDrain})
	if err != nil {
		fmt.Println(err) // a *BusyError naming the holder, ErrSuperseded, or why the directory cannot be used
		return
	}
	defer release()
	rec, running, _ := runnerstate.Running(dir)
	fmt.Println("running:", running, "by me:", rec.PID == os.Getpid())
	// Output:
	// running: true by me: true
}

// Running answers from the kernel lock alone: a directory nobody holds is not
// running, whatever files it has, and asking creates nothing.
func ExampleRunning() {
	dir := filepath.Join(os.TempDir(), "runnerstate-example-never-made")
	_, running, err := runnerstate.Running(dir)
	_, statErr := os.Stat(dir)
	fmt.Println("running:", running, "error:", err, "created:", statErr == nil)
	// Output:
	// running: false error: <nil> created: false
}

// Status is what an operator needs in one value (runnerctl status prints it):
// who holds the directory, whether that identity is verified, a pending
// restart request, the starters waiting, stale pids, and warnings.
func ExampleStatus() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)

	release, _ := runnerstate.Acquire(dir)
	defer release()
	runnerstate.Publish(dir, runnerstate.Record{}) // names the holder where a lock file cannot (Windows)
	runnerstate.RequestRestart(dir, runnerstate.RestartDrain)

	r, err := runnerstate.Status(dir)
	fmt.Println("held:", r.Held, "holder is me:", r.Holder.PID == os.Getpid(), "restart:", r.Restart, "error:", err)
	// Output:
	// held: true holder is me: true restart: drain error: <nil>
}

// Publish is the holder's record: where to reach the runner (Meta), and what
// it does. Only the holder may publish; Meta is readable by every local user,
// so it never carries a secret.
func ExamplePublish() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)

	err := runnerstate.Publish(dir, runnerstate.Record{})
	fmt.Println("before Acquire:", errors.Is(err, runnerstate.ErrNotHolder))

	release, _ := runnerstate.Acquire(dir)
	defer release()
	meta, _ := json.Marshal(map[string]string{"socket": filepath.Join(dir, "api.sock")})
	runnerstate.Publish(dir, runnerstate.Record{MaxParallel: 4, Meta: meta})

	rec, _, _ := runnerstate.Running(dir)
	var where struct{ Socket string }
	json.Unmarshal(rec.Meta, &where)
	fmt.Println("max parallel:", rec.MaxParallel, "socket:", filepath.Base(where.Socket))
	// Output:
	// before Acquire: true
	// max parallel: 4 socket: api.sock
}

// WatchRestart is how a runner hears that it should go: each new request,
// or a stronger one ("now" after "drain"), and in the holding process
// RestartLost when its lock file was deleted under it.
func ExampleWatchRestart() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)
	release, _ := runnerstate.Acquire(dir)
	defer release()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	restarts := runnerstate.WatchRestart(ctx, dir)

	runnerstate.RequestRestart(dir, runnerstate.RestartDrain) // e.g. runnerctl restart --drain
	fmt.Println(<-restarts)
	runnerstate.RequestRestart(dir, runnerstate.RestartNow)
	fmt.Println(<-restarts)
	// Output:
	// drain
	// now
}

// Standby waits while another live runner holds the directory, for a process
// that would do the runner's work itself (a CLI, a foreground job): here
// nobody holds it, so it returns at once, resumed.
func ExampleStandby() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := runnerstate.Standby(ctx, dir, runnerstate.StandbyOptions{})
	fmt.Println("resumed:", res.Resumed, "error:", err)
	// Output:
	// resumed: true error: <nil>
}

// TryLock takes a kernel lock without waiting; a second taker, even in this
// process, is refused until the first lets go.
func ExampleTryLock() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "index.lock")

	unlock, err := runnerstate.TryLock(path)
	fmt.Println("first:", err)
	_, err = runnerstate.TryLock(path)
	fmt.Println("second busy:", errors.Is(err, runnerstate.ErrBusy))
	unlock()
	unlock2, err := runnerstate.TryLock(path)
	fmt.Println("after unlock:", err)
	unlock2()
	// Output:
	// first: <nil>
	// second busy: true
	// after unlock: <nil>
}
