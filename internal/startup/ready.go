package startup

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/liveness"
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
	told   bool // Ready has answered true
}

// attempt is the attempt that started this process (AttemptEnv), 0 when
// none did, taken from the environment when the package is loaded.
var attempt uint64

// The variables an attempt gave this process are read once, here, and
// removed from its environment, so that none reaches a process it starts.
func init() {
	readiness.f, readiness.forDir = spawn.TakeReadiness()
	attempt, _ = strconv.ParseUint(os.Getenv(AttemptEnv), 10, 64)
	os.Unsetenv(AttemptEnv)
}

// StartedAttempt is the number (Attempt.Seq) of the attempt that started
// this process, as its AttemptEnv said; 0 when no attempt started it.
func StartedAttempt() uint64 { return attempt }

// Ready tells the process that started this one, through its readiness
// descriptor, that this process is ready, when dir is the directory it was
// started for. Only the first call for that directory writes it, and
// returns true: the caller then marks the attempt ready (MarkReady).
func Ready(dir string) (first bool) {
	readiness.Lock()
	defer readiness.Unlock()
	if readiness.told || readiness.forDir == "" || !sameDirPath(dir, readiness.forDir) {
		return false
	}
	readiness.told = true
	if f := readiness.f; f != nil {
		readiness.f = nil
		// An error is the starter gone, or done already (it saw the
		// record first): it looks at the directory in any case.
		spawn.SignalReady(f)
	}
	return true
}

// MarkReady records in the attempt record that its process, this one (isSelf
// says whether an identity is), has been ready: the attempt is over, and
// once this process lets go of the directory, a caller starts another
// instead of waiting for it to be ready again. It takes the attempt lock
// (the starter holds it until it has recorded the attempt); an attempt of
// another process, or none, is left as it is.
func MarkReady[R any](p Protocol[R], isSelf func(liveness.Identity) bool) error {
	release, err := p.Lock()
	if err != nil {
		return err
	}
	defer release()
	a, ok, err := p.Read()
	if err != nil || !ok || a.Ready || a.Failed || !isSelf(a.Child) {
		return err
	}
	a.Ready = true
	return p.Write(a)
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
