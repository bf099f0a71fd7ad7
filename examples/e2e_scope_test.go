//go:build linux

package examples_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scopeWait bounds every step of the scope story; reached only when it is
// broken.
const scopeWait = 60 * time.Second

// scopeServer is one run of examples/scope.
type scopeServer struct {
	cmd     *exec.Cmd
	serving chan string // the "serving ..." line, once
	log     *lockedWriter
	done    chan struct{}
}

// startScopeServer runs bin with args and env; it is killed and reaped when
// the test ends.
func startScopeServer(t *testing.T, bin string, env []string, args ...string) *scopeServer {
	t.Helper()
	s := &scopeServer{cmd: exec.Command(bin, args...), serving: make(chan string, 1), log: &lockedWriter{buf: &bytes.Buffer{}}, done: make(chan struct{})}
	s.cmd.Env = env
	s.cmd.Stderr = s.log
	out, err := s.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, s.cmd.Start())
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "serving ") {
				s.serving <- sc.Text()
			}
		}
	}()
	go func() { <-lines; s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.cmd.Process.Kill(); <-s.done })
	return s
}

func (s *scopeServer) expectServing(t *testing.T) string {
	t.Helper()
	select {
	case line := <-s.serving:
		return line
	case <-s.done:
		t.Fatalf("the server exited before serving (exit %d); its log:\n%s", s.cmd.ProcessState.ExitCode(), s.logText())
	case <-time.After(scopeWait):
		t.Fatalf("the server did not serve within %v; its log:\n%s", scopeWait, s.logText())
	}
	return ""
}

func (s *scopeServer) stop(t *testing.T) int {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-s.done:
	case <-time.After(scopeWait):
		t.Fatalf("the server did not stop within %v; its log:\n%s", scopeWait, s.logText())
	}
	return s.cmd.ProcessState.ExitCode()
}

func (s *scopeServer) logText() string {
	return s.log.String()
}

// runScopeOnce runs bin to completion and returns its exit code and
// combined output.
func runScopeOnce(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err, "%s", out)
	return 0, string(out)
}

// The scope example as a user runs it: a server with the defaults; a second
// one for another data dir is refused and names the first one's data dir; a
// third one for the same data dir in another scope is refused by the data
// dir and lets its scope go; a waiting one is admitted when the first stops
// on SIGTERM.
func TestScopeExampleServers(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "scope")
	out, err := exec.Command("go", "build", "-o", bin, "./scope").CombinedOutput()
	require.NoError(t, err, "go build ./scope: %s", out)
	tmp := t.TempDir()
	env := append(os.Environ(), "TMPDIR="+tmp, "XDG_RUNTIME_DIR=")
	scopeDir := defaultDir(tmp, "runnerstate-scope")   // the default scope
	dataA := defaultDir(tmp, "runnerstate-scope-data") // the default data dir
	dataB := filepath.Join(tmp, "b")
	otherScope := filepath.Join(tmp, "other-scope")

	a := startScopeServer(t, bin, env)
	assert.Contains(t, a.expectServing(t), dataA)
	owner, ok := runnerstate.ReadScopeOwner(scopeDir)
	require.True(t, ok)
	assert.Equal(t, dataA, owner.DataDir)
	assert.Equal(t, a.cmd.Process.Pid, owner.PID)

	code, out2 := runScopeOnce(t, bin, env, "-data", dataB)
	assert.Equal(t, runnerstate.ExitBusy, code, "%s", out2)
	assert.Contains(t, out2, "refused")
	assert.Contains(t, out2, "serves data dir "+dataA)

	// Asked once: with a wait, a loaded machine can spend it all taking the
	// free scope, and the wait then ends there, not at the data dir.
	code, out2 = runScopeOnce(t, bin, env, "-scope", otherScope, "-data", dataA)
	assert.Equal(t, runnerstate.ExitBusy, code, "%s", out2)
	assert.Contains(t, out2, "serves data dir "+dataA)
	_, ok = runnerstate.ReadScopeOwner(otherScope)
	assert.False(t, ok, "refused by the data dir, it let its scope go")
	unlock, err := runnerstate.TryLock(filepath.Join(otherScope, "scope.lock"))
	require.NoError(t, err, "the other scope is free")
	unlock()

	b := startScopeServer(t, bin, env, "-data", dataB, "-wait", "1m")
	// b waits for the scope in the kernel; a stops cleanly and b is admitted.
	waitBlockedOn(t, filepath.Join(scopeDir, "scope.lock"))
	assert.Equal(t, 0, a.stop(t), "a clean SIGTERM exit; log:\n%s", a.logText())
	logA := a.logText()
	assert.Less(t, strings.Index(logA, "teardown finished"), strings.Index(logA, "msg=stopped"), "teardown before release:\n%s", logA)
	assert.Contains(t, b.expectServing(t), dataB)
	owner, ok = runnerstate.ReadScopeOwner(scopeDir)
	require.True(t, ok)
	assert.Equal(t, dataB, owner.DataDir)

	assert.Equal(t, 0, b.stop(t))
	_, ok = runnerstate.ReadScopeOwner(scopeDir)
	assert.False(t, ok, "the last server removed its sidecar")
}

// waitBlockedOn waits until the kernel lists a process blocked in flock(2)
// on the file at path (/proc/locks "->" lines).
func waitBlockedOn(t *testing.T, path string) {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	suffix := ":" + strconv.FormatUint(st.Ino, 10)
	deadline := time.Now().Add(scopeWait)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile("/proc/locks")
		require.NoError(t, err)
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) >= 7 && f[1] == "->" && f[2] == "FLOCK" && strings.HasSuffix(f[6], suffix) {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("nobody blocked on %s within %v", path, scopeWait)
}

// lockedWriter is a buffer that exec's copying goroutine writes while the
// test reads it.
type lockedWriter struct {
	mu  sync.Mutex
	buf *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
