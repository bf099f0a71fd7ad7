package startup

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/spawn"
)

// The readiness a process started by an attempt owes its starter: the
// descriptor it was given, taken from the environment when the package is
// loaded (so that no process it starts inherits it), and written once, when
// the directory it was started for is ready.
var readiness struct {
	sync.Mutex
	f      *os.File
	forDir string
}

func init() { readiness.f, readiness.forDir = spawn.TakeReadiness() }

// Ready tells the process that started this one, through its readiness
// descriptor, that this process is ready, when dir is the directory it was
// started for. Only the first call for that directory writes it.
func Ready(dir string) {
	readiness.Lock()
	defer readiness.Unlock()
	if f := readiness.f; f != nil && sameDirPath(dir, readiness.forDir) {
		readiness.f = nil
		// An error is the starter gone, or done already (it saw the
		// record first): it looks at the directory in any case.
		spawn.SignalReady(f)
	}
}

// sameDirPath reports whether dir is the directory at path.
func sameDirPath(dir, path string) bool {
	if abs, err := filepath.Abs(dir); err == nil && abs == path {
		return true
	}
	a, err1 := durable.KeyOf(dir)
	b, err2 := durable.KeyOf(path)
	return err1 == nil && err2 == nil && a == b
}
