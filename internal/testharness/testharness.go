// Package testharness runs the multi-process tests of this module with real
// processes: a test binary re-executes itself to play a named role, and the
// test talks to it in lines, commands on its stdin and events on its stdout.
// Closing a child's stdin is its cue to let go and exit, and every child is
// killed and reaped when its test ends, whatever happened.
//
// It is for tests only (of the root package, internal/liveness and bench),
// in the shape of the Go toolchain's own tests, which re-execute the test
// binary with an environment variable selecting the role. It works on Linux
// and on Windows (run under Wine 8 in CI), and so do TempDir and
// SymlinksWork, which make the portable tests' files work there too.
package testharness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// RoleEnv names the role a re-executed test binary plays.
const RoleEnv = "RUNNERSTATE_TEST_ROLE"

// Wait bounds every wait for a child's event: generous, because the machines
// are shared, and only ever reached when something is broken.
const Wait = 20 * time.Second

// A Role is a child process's program. arg is the last command-line
// argument (a path, usually); the result is the exit code.
type Role func(arg string) int

// Roles are a test binary's roles by name.
type Roles map[string]Role

// RunRole runs the role RoleEnv names and exits with its code, when this
// process is a child; otherwise it returns. Call it first in TestMain.
func RunRole(roles Roles) {
	name := os.Getenv(RoleEnv)
	if name == "" {
		return
	}
	role, ok := roles[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "testharness: unknown role", name)
		os.Exit(2)
	}
	os.Exit(role(os.Args[len(os.Args)-1]))
}

// Say prints one event line for the parent.
func Say(format string, args ...any) {
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// Commands returns the child's stdin lines; the channel is closed at EOF.
func Commands() <-chan string {
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

// Command is the command that re-executes this test binary with arg as its
// last argument, behind the prefix command if any (unshare ..., setpriv ...).
// Start it with StartCmd.
func Command(arg string, prefix ...string) *exec.Cmd {
	args := append(append([]string{}, prefix...), os.Args[0], "-test.run=^$", "-test.bench=^$", arg)
	return exec.Command(args[0], args[1:]...)
}

// Child is a re-executed test binary playing a role.
type Child struct {
	// Cmd is the running command.
	Cmd *exec.Cmd
	// Lines are the child's stdout lines; closed when its stdout closes.
	Lines <-chan string

	t     testing.TB
	stdin io.WriteCloser
	once  sync.Once
	err   error
	done  chan struct{}
}

// Start starts the test binary in role with arg. The child is killed and
// reaped when the test ends.
func Start(t testing.TB, role, arg string) *Child {
	t.Helper()
	return StartCmd(t, Command(arg), role)
}

// StartCmd is Start for a command the caller prepared (another uid, a
// namespace, a prefix command, more environment). Its stderr goes to the
// test log, each line behind the role's name.
func StartCmd(t testing.TB, cmd *exec.Cmd, role string) *Child {
	t.Helper()
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	// Under -race a child otherwise sleeps a second at exit (atexit_sleep_ms).
	cmd.Env = append(cmd.Env, RoleEnv+"="+role, "GORACE=atexit_sleep_ms=0")
	if cmd.Stderr == nil {
		cmd.Stderr = &logWriter{t: t, prefix: role + ": "}
	}
	cmd, stdin, stdout := start(t, cmd)
	lines := make(chan string, 64)
	c := &Child{Cmd: cmd, Lines: lines, t: t, stdin: stdin, done: make(chan struct{})}
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { c.Kill(); c.Wait() })
	return c
}

// startTries bounds the starts of one child when process creation fails as
// only Wine's does (startFault).
const startTries = 3

// start starts cmd with pipes to its stdin and its stdout, and returns the
// command that started: cmd, or a copy of it when Wine's process creation
// failed (startFault) and the start was tried again. It fails the test on
// any other error, and after startTries such failures.
func start(t testing.TB, cmd *exec.Cmd) (*exec.Cmd, io.WriteCloser, io.ReadCloser) {
	t.Helper()
	blank := *cmd // before the pipes are attached to cmd: what a retry starts from
	for try := 1; ; try++ {
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		err = cmd.Start()
		if err == nil {
			return cmd, stdin, stdout
		}
		if !startFault(err) || try == startTries {
			t.Fatal(err)
		}
		t.Logf("%v (Wine's process creation: the new process ended before it started; trying again)", err)
		next := blank
		cmd = &next
	}
}

// PID is the child's pid.
func (c *Child) PID() int { return c.Cmd.Process.Pid }

// Expect waits for the child's next line and checks it starts with prefix;
// it returns the rest of the line, trimmed. The test fails when the child
// says something else, exits first, or stays silent for Wait.
func (c *Child) Expect(prefix string) string {
	c.t.Helper()
	select {
	case line, ok := <-c.Lines:
		if !ok {
			c.t.Fatalf("child %d exited before saying %q", c.PID(), prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			c.t.Fatalf("child %d said %q, want %q...", c.PID(), line, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(line, prefix))
	case <-time.After(Wait):
		c.t.Fatalf("child %d did not say %q within %v", c.PID(), prefix, Wait)
	}
	return ""
}

// Send writes one command line to the child.
func (c *Child) Send(cmd string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

// CloseStdin closes the child's stdin: its cue to let go and exit.
func (c *Child) CloseStdin() { c.stdin.Close() }

// Stop closes the child's stdin and waits for it to exit.
func (c *Child) Stop() error {
	c.CloseStdin()
	return c.Wait()
}

// Kill sends the child SIGKILL (TerminateProcess on Windows).
func (c *Child) Kill() { c.Cmd.Process.Kill() }

// Wait reaps the child once; later calls return the first result.
func (c *Child) Wait() error {
	c.once.Do(func() {
		c.err = c.Cmd.Wait()
		close(c.done)
	})
	<-c.done
	return c.err
}

// logWriter copies a child's stderr into the test log, line by line.
type logWriter struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w.t.Log(w.prefix + line)
	}
	return len(p), nil
}

// LogBuffer is a buffer safe for the concurrent writes of a logger and the
// reads of a test.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is what was written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Eventually polls cond every millisecond until it holds or Wait passes. It
// is for states the test cannot be told about (a process becoming a zombie,
// a waiter blocking in the kernel), never as a stand-in for synchronisation
// it could have.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, Wait)
		}
		time.Sleep(time.Millisecond)
	}
}

// EndWatch ends a watch (a WatchRestart, a channel closed when its context
// ends) before the test's directories are removed: at cleanup it cancels
// the watch's context and drains ch until it is closed, at most Wait. Call
// it after TempDir, since cleanups run last registered first. Under Wine 8
// a file removed while a reader has it open stays in its directory until
// the reader closes it, so a watch still reading fails TempDir's cleanup
// with "Directory is not empty".
func EndWatch[T any](t testing.TB, cancel context.CancelFunc, ch <-chan T) {
	t.Cleanup(func() {
		cancel()
		timer := time.NewTimer(Wait)
		defer timer.Stop()
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					return
				}
			case <-timer.C:
				t.Errorf("the watch was not over %v after its context ended", Wait)
				return
			}
		}
	})
}

// Bounded is a context for calls that must not wait in a test: it bounds
// them by Wait, so that a bug fails the test instead of hanging it.
func Bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	t.Cleanup(cancel)
	return ctx
}

// TempDir is t.TempDir for tests that also run on Windows, with a cleanup
// that works under Wine 8 too. There os.RemoveAll fails on every path with
// "Invalid function" (Go deletes through FileDispositionInformationEx, which
// Wine 8 does not implement: .ci/windows/repro/removeall), so t.TempDir's
// cleanup fails every test; what RemoveAll leaves is removed here entry by
// entry with os.Remove, children first. A file that cannot be removed fails
// the test, as it does with t.TempDir.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", tempPattern(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.RemoveAll(dir) == nil {
			return
		}
		var paths []string
		filepath.WalkDir(dir, func(p string, _ fs.DirEntry, _ error) error {
			paths = append(paths, p)
			return nil
		})
		for i := len(paths) - 1; i >= 0; i-- { // children before their parent
			if err := os.Remove(paths[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("TempDir cleanup: %v", err)
			}
		}
	})
	return dir
}

// tempPattern is a MkdirTemp pattern from a test's name, as t.TempDir makes
// one: path separators and other odd characters become '_', and a long name
// is cut.
func tempPattern(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b) + "-"
}

// SymlinksWork reports whether os.Symlink makes symlinks here. Not on
// Windows without the privilege (it fails), nor under Wine 8, whose
// CreateSymbolicLinkW reports success and makes nothing
// (.ci/windows/repro/symlink). It is probed once.
var SymlinksWork = sync.OnceValue(func() bool {
	dir, err := os.MkdirTemp("", "symlink-probe-")
	if err != nil {
		return false
	}
	defer os.Remove(dir)
	link := filepath.Join(dir, "link")
	if os.Symlink("target", link) != nil {
		return false
	}
	defer os.Remove(link)
	fi, err := os.Lstat(link)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
})

// NeedSymlinks skips a test that plants a symlink where none can be made.
func NeedSymlinks(t testing.TB) {
	t.Helper()
	if !SymlinksWork() {
		t.Skip("os.Symlink makes no symlinks here (Windows without the privilege; Wine 8's CreateSymbolicLinkW is a stub)")
	}
}

// PublicDir makes a directory every user can enter and read (0755), for a
// test that runs a process as another user; it is removed when the test
// ends. t.TempDir's directories are 0700, and so may be $TMPDIR itself
// (mktemp -d makes it so): PublicDir uses the first of $TMPDIR, /tmp and
// /var/tmp whose every ancestor other users may search, and skips the test,
// saying why, when none is.
func PublicDir(t testing.TB) string {
	t.Helper()
	var refused []string
	for _, base := range []string{os.TempDir(), "/tmp", "/var/tmp"} {
		if why := searchableByOthers(base); why != "" {
			refused = append(refused, why)
			continue
		}
		dir, err := os.MkdirTemp(base, "runnerstate-public-")
		if err != nil {
			refused = append(refused, err.Error())
			continue
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Skipf("no temporary directory another user can reach, for a process run as another user: %s", strings.Join(refused, "; "))
	return ""
}

// searchableByOthers says why other users cannot reach dir (an ancestor
// without the search bit for others), or "" when they can.
func searchableByOthers(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err.Error()
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err.Error()
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Sprintf("%s is %v, which other users may not enter (chmod o+x it, or set TMPDIR to a directory they may)", p, fi.Mode().Perm())
		}
		if p == filepath.Dir(p) {
			return ""
		}
	}
}
