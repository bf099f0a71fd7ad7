package testharness

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// fakeT records what start says, and ends its goroutine at Fatal.
type fakeT struct {
	testing.TB
	logs, fatals int
}

func (f *fakeT) Helper()             {}
func (f *fakeT) Logf(string, ...any) { f.logs++ }
func (f *fakeT) Fatal(...any)        { f.fatals++; runtime.Goexit() }

// start tries again, on a copy of the command, only after a start fault, and
// gives up after startTries; any other error fails at once.
func TestStartTriesAgainOnlyAfterAStartFault(t *testing.T) {
	missing := filepath.Join(TempDir(t), "missing")
	for _, tc := range []struct {
		name   string
		fault  bool
		starts int
	}{
		{"a start fault", true, startTries},
		{"any other error", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			starts := 0
			old := startFault
			t.Cleanup(func() { startFault = old })
			startFault = func(err error) bool {
				starts++
				return tc.fault && err != nil
			}
			f := &fakeT{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				start(f, exec.Command(missing))
			}()
			<-done
			if starts != tc.starts || f.fatals != 1 || f.logs != tc.starts-1 {
				t.Errorf("%d starts, %d fatal, %d logged; want %d, 1, %d", starts, f.fatals, f.logs, tc.starts, tc.starts-1)
			}
		})
	}
}
