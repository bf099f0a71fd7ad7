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

// A server owns its scope and its data dir: the scope first, then the data
// dir; when the data dir is refused it lets the scope go before exiting; on
// shutdown it tears down first and releases last. Another would-be server of
// the scope is refused and told which data dir is being served.
func ExampleAcquireScope() {
	base, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(base)
	scopeDir := filepath.Join(base, "scope")
	dataDir := filepath.Join(base, "data-a")
	os.MkdirAll(dataDir, 0o755)
	ctx := context.Background()

	releaseScope, err := runnerstate.AcquireScope(ctx, scopeDir, dataDir)
	if err != nil {
		fmt.Println(err) // a *BusyError names the data dir the other server serves
		return
	}
	unlock, err := runnerstate.Lock(ctx, filepath.Join(dataDir, "server.lock"))
	if err != nil {
		releaseScope() // never keep the scope while serving nothing
		fmt.Println(err)
		return
	}
	owner, _ := runnerstate.ReadScopeOwner(scopeDir)
	fmt.Println("serving:", filepath.Base(owner.DataDir))

	wait, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	_, err = runnerstate.AcquireScope(wait, scopeDir, filepath.Join(base, "data-b"))
	cancel()
	var busy *runnerstate.BusyError
	if errors.As(err, &busy) {
		fmt.Println("second server refused; the scope serves:", filepath.Base(busy.Owner))
	}

	// Shutdown: stop serving and close everything first, then release the
	// data dir, then the scope.
	unlock()
	releaseScope()
	_, recorded := runnerstate.ReadScopeOwner(scopeDir)
	fmt.Println("owner recorded after release:", recorded)
	// Output:
	// serving: data-a
	// second server refused; the scope serves: data-a
	// owner recorded after release: false
}

// Syncs hold the sync mark together for their whole run; a reset takes it
// alone, without waiting, and is refused while any sync runs.
func ExampleNoSyncRunning() {
	root, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(root)

	syncDone, err := runnerstate.SyncRunning(context.Background(), root)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = runnerstate.NoSyncRunning(root)
	fmt.Println("reset while a sync runs:", errors.Is(err, runnerstate.ErrSyncRunning))
	syncDone()

	resetDone, err := runnerstate.NoSyncRunning(root)
	if err != nil {
		fmt.Println(err) // ErrSyncUnknown says what to do when the mark is broken
		return
	}
	fmt.Println("resetting") // delete everything in root but sync.lock here
	resetDone()
	// Output:
	// reset while a sync runs: true
	// resetting
}
