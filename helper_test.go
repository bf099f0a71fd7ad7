//go:build linux

package runnerstate

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Multi-process tests re-execute the test binary with RUNNERSTATE_TEST_ROLE
// set; TestMain runs that role instead of the tests. A child reports on stdout
// one line per event and takes commands, one per line, on stdin; closing its
// stdin tells it to let go and exit.
const roleEnv = "RUNNERSTATE_TEST_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role, os.Args[len(os.Args)-1]))
	}
	goleak.VerifyTestMain(m)
}

// roles are the child processes' programs. arg is the last command-line
// argument (a path, usually).
var roles = map[string]func(arg string) int{}

func runRole(role, arg string) int {
	fn, ok := roles[role]
	if !ok {
		fmt.Fprintln(os.Stderr, "unknown role", role)
		return 2
	}
	return fn(arg)
}

// say prints one event line for the parent.
func say(format string, args ...any) {
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// commands returns the child's stdin lines; the channel is closed at EOF.
func commands() <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// child is a re-executed test binary playing a role.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	once  sync.Once
	err   error
	done  chan struct{}
}

// childWait bounds every wait for a child's event: generous, because the
// machines are shared, and only ever reached when something is broken.
const childWait = 20 * time.Second

// startChild starts the test binary in role with arg. The child is killed and
// reaped when the test ends, whatever happened.
func startChild(t testing.TB, role, arg string) *child {
	t.Helper()
	return startChildCmd(t, exec.Command(os.Args[0], "-test.run=^$", arg), role)
}

// startChildCmd is startChild for a command the caller prepared (another
// uid, a namespace, a prefix command). The child is killed and reaped when
// the test ends.
func startChildCmd(t testing.TB, cmd *exec.Cmd, role string) *child {
	t.Helper()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, roleEnv+"="+role, "GORACE=atexit_sleep_ms=0")
	cmd.Stderr = &prefixWriter{t: t, prefix: role + ": "}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { c.kill(); c.wait() })
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// expect waits for the child's next line and checks it starts with prefix; it
// returns the rest of the line, trimmed.
func (c *child) expect(prefix string) string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("child %d exited before saying %q", c.pid(), prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			c.t.Fatalf("child %d said %q, want %q...", c.pid(), line, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(line, prefix))
	case <-time.After(childWait):
		c.t.Fatalf("child %d did not say %q within %v", c.pid(), prefix, childWait)
	}
	return ""
}

// send writes one command line to the child.
func (c *child) send(cmd string) {
	c.t.Helper()
	_, err := io.WriteString(c.stdin, cmd+"\n")
	require.NoError(c.t, err)
}

// stop closes the child's stdin (its cue to let go) and waits for it to exit.
func (c *child) stop() error {
	c.stdin.Close()
	return c.wait()
}

func (c *child) kill() { c.cmd.Process.Signal(syscall.SIGKILL) }

// wait reaps the child once; later calls return the first result.
func (c *child) wait() error {
	c.once.Do(func() {
		c.err = c.cmd.Wait()
		close(c.done)
	})
	<-c.done
	return c.err
}

// prefixWriter copies a child's stderr into the test log.
type prefixWriter struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + line)
	}
	return len(p), nil
}

// logBuffer captures the package's warnings for the length of a test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func captureLog(t *testing.T) *logBuffer {
	b := &logBuffer{}
	SetLogger(slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { SetLogger(nil) })
	return b
}

// eventually polls cond every millisecond until it holds or the bound passes.
// It is for states the test cannot be told about (a process becoming a
// zombie), never as a stand-in for synchronisation it could have.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(childWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, childWait)
		}
		time.Sleep(time.Millisecond)
	}
}

// background is a context for calls that must not wait in a test: it bounds
// them so that a bug fails the test instead of hanging it.
func background(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	t.Cleanup(cancel)
	return ctx
}
