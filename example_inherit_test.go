//go:build linux

package runnerstate_test

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/runnerstate/runnerstate"
)

// Inherit makes a child part of the runner's tree: while it lives (and keeps
// the descriptor, number 3 here), the directory is not free for the next
// runner, even after this runner has gone.
func ExampleInherit() {
	dir, _ := os.MkdirTemp("", "runnerstate-example")
	defer os.RemoveAll(dir)
	release, _ := runnerstate.Acquire(dir)
	defer release()

	cmd := exec.Command("true")
	err := runnerstate.Inherit(dir, cmd)
	fmt.Println("inherit:", err, "extra files:", len(cmd.ExtraFiles))
	fmt.Println("run:", cmd.Run())
	fmt.Println("after start:", runnerstate.Inherit(dir, cmd) != nil)
	// Output:
	// inherit: <nil> extra files: 1
	// run: <nil>
	// after start: true
}
