// Package spawn starts a process detached from its caller, reaps it in the
// background, and passes it a readiness descriptor: a pipe the started
// process writes one byte to (and closes) when it is ready, which the
// caller reads. The started process's other readiness, a service
// manager's notification (sdnotify.go), is here too.
//
// Detached means: a session of its own (setsid(2) on Unix; on Windows a new
// process group without a console), stdin from the null device, stdout and
// stderr to files the caller gives (never a pipe back to the caller), and
// none of the caller's descriptors but cmd.ExtraFiles and the readiness
// descriptor. It outlives the caller, the caller's terminal and the
// caller's process group.
//
// Each started process is reaped by one goroutine, reap, that lives while
// the process does, and its readiness descriptor is read by another,
// awaitReady, that lives until the process is ready or has exited (tests
// that check for leaked goroutines ignore both, by name).
package spawn

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The variables a started process finds in its environment: the number of
// its readiness descriptor, and what it is ready for (the caller's word,
// here a directory).
const (
	ReadyFDEnv  = "RUNNERSTATE_READY_FD"
	ReadyForEnv = "RUNNERSTATE_READY_FOR"
)

// NotifySocketEnv is the service manager's socket variable, which a started
// process never inherits: it would speak for its caller's unit.
const NotifySocketEnv = "NOTIFY_SOCKET"

// Child is a process Start started.
type Child struct {
	PID int

	ready  chan struct{} // closed when the process said it is ready
	exited chan struct{} // closed once the process has exited and been reaped

	mu       sync.Mutex
	exitCode int
	how      string
	waitErr  error
	readDone chan struct{} // closed when awaitReady returned; nil without a readiness descriptor
	readyR   *os.File
}

// Ready is closed when the process wrote its readiness descriptor.
func (c *Child) Ready() <-chan struct{} { return c.ready }

// Exited is closed once the process has exited and been reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// ExitCode is the process's exit status once Exited is closed: its exit
// code, or 128+n when signal n ended it; -1 before.
func (c *Child) ExitCode() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitCode
}

// How says how the process ended once Exited is closed: "exit N",
// "signal N", or "unknown" when its status could not be read.
func (c *Child) How() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.how
}

// WaitErr is what waiting for the process returned (an *exec.ExitError for
// a non-zero status), once Exited is closed.
func (c *Child) WaitErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waitErr
}

// ErrStream refuses a standard stream that is not an *os.File: a pipe back
// to the caller (an io.Writer copied by a goroutine) would tie the started
// process to it.
var ErrStream = errors.New("must be nil or an *os.File: a pipe back to the caller would tie the started process to it")

// Start starts cmd detached (see the package doc), with env added to its
// environment (cmd.Env, or this process's when nil) after removing
// NOTIFY_SOCKET and any variable of the readiness descriptor, and out as
// its stdout and stderr where cmd leaves them nil. readyFor names what the
// process is to say it is ready for (ReadyForEnv); "" passes no readiness
// descriptor. Where descriptors cannot be passed (Windows), none is, and
// ReadyForEnv alone says what the process was started for.
//
// It changes cmd: Env, ExtraFiles (the readiness descriptor appended),
// SysProcAttr (Setsid set, Setpgid, Setctty and Foreground cleared on Unix;
// CREATE_NEW_PROCESS_GROUP and DETACHED_PROCESS added on Windows), Stdout
// and Stderr when nil. Before starting it, it marks every descriptor of
// this process above stderr close-on-exec, under syscall.ForkLock, so that
// the process inherits none that was opened without it.
//
// onExit, when not nil, is called by reap once the process has exited and
// its status is recorded, before Exited is closed.
//
// Errors: ErrStream (wrapped, naming the stream) for a stream that is not
// an *os.File; errors.ErrUnsupported where processes cannot be started;
// otherwise cmd.Start's error.
func Start(cmd *exec.Cmd, env []string, out *os.File, readyFor string, onExit func(*Child)) (*Child, error) {
	if err := checkStreams(cmd); err != nil {
		return nil, err
	}
	if cmd.Stdout == nil && out != nil {
		cmd.Stdout = out
	}
	if cmd.Stderr == nil && out != nil {
		cmd.Stderr = out
	}
	var readyR, readyW *os.File
	if readyFor != "" {
		env = append(env, ReadyForEnv+"="+readyFor)
	}
	if readyFor != "" && canPassFiles {
		var err error
		if readyR, readyW, err = os.Pipe(); err != nil {
			return nil, err
		}
		env = append(env, ReadyFDEnv+"="+strconv.Itoa(3+len(cmd.ExtraFiles)))
		cmd.ExtraFiles = append(cmd.ExtraFiles, readyW)
	}
	cmd.Env = append(cleanEnv(cmd.Env), env...)
	if err := detach(cmd); err != nil {
		closeAll(readyR, readyW)
		return nil, err
	}
	markCloseOnExec()
	err := cmd.Start()
	closeAll(readyW)
	if err != nil {
		closeAll(readyR)
		return nil, err
	}
	c := &Child{PID: cmd.Process.Pid, ready: make(chan struct{}), exited: make(chan struct{}), exitCode: -1, readyR: readyR}
	if readyR != nil {
		c.readDone = make(chan struct{})
		go awaitReady(c, readyR)
	}
	go reap(c, cmd, onExit)
	return c, nil
}

// Check refuses what can be told wrong about cmd before it is started: an
// error it carries already, no path, a path that cannot be run or is a
// directory, a name that is not in PATH, a stream that is not an *os.File
// (ErrStream, wrapped). Each message begins with "the command"; the caller
// says what it was about to start.
func Check(cmd *exec.Cmd) error {
	if cmd.Err != nil {
		return fmt.Errorf("the command cannot be run: %w", cmd.Err)
	}
	if cmd.Path == "" {
		return errors.New("the command has no path; build it with exec.Command")
	}
	if strings.ContainsRune(cmd.Path, filepath.Separator) || strings.ContainsRune(cmd.Path, '/') {
		fi, err := os.Stat(cmd.Path)
		if err != nil {
			return fmt.Errorf("the command %s cannot be run: %w", cmd.Path, err)
		}
		if fi.IsDir() {
			return fmt.Errorf("the command %s is a directory", cmd.Path)
		}
	} else if _, err := exec.LookPath(cmd.Path); err != nil {
		return fmt.Errorf("the command %s is not in PATH: %w", cmd.Path, err)
	}
	return checkStreams(cmd)
}

// checkStreams refuses a standard stream of cmd that is not an *os.File.
func checkStreams(cmd *exec.Cmd) error {
	for name, s := range map[string]any{"stdin": cmd.Stdin, "stdout": cmd.Stdout, "stderr": cmd.Stderr} {
		if s == nil {
			continue
		}
		if _, ok := s.(*os.File); !ok {
			return fmt.Errorf("the command's %s %w", name, ErrStream)
		}
	}
	return nil
}

// cleanEnv is env (this process's when nil) without NOTIFY_SOCKET and the
// readiness variables.
func cleanEnv(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case NotifySocketEnv, ReadyFDEnv, ReadyForEnv:
			continue
		}
		out = append(out, kv)
	}
	return out
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// awaitReady reads c's readiness descriptor until the process writes it (it
// is ready), closes it, or exits (reap ends the read then).
func awaitReady(c *Child, r *os.File) {
	defer close(c.readDone)
	defer r.Close()
	var b [1]byte
	if n, _ := r.Read(b[:]); n > 0 {
		close(c.ready)
	}
}

// readLinger is how long reap lets awaitReady go on reading after the
// process exited: a byte it wrote just before is already in the pipe, and
// only a process it started that kept the descriptor holds the read longer.
const readLinger = 5 * time.Millisecond

// reap waits for c's process to exit, records its status and calls onExit.
func reap(c *Child, cmd *exec.Cmd, onExit func(*Child)) {
	err := cmd.Wait()
	code, how := -1, "unknown"
	if cmd.ProcessState != nil {
		code = exitCode(cmd.ProcessState)
		how = "exit " + strconv.Itoa(code)
		if code > 128 && code != cmd.ProcessState.ExitCode() {
			how = "signal " + strconv.Itoa(code-128)
		}
	}
	if c.readDone != nil {
		if c.readyR.SetReadDeadline(time.Now().Add(readLinger)) != nil {
			c.readyR.Close() // not pollable: end the read at once
		}
		<-c.readDone
	}
	c.mu.Lock()
	c.exitCode, c.how, c.waitErr = code, how, err
	c.mu.Unlock()
	if onExit != nil {
		onExit(c)
	}
	close(c.exited)
}

// RotateLog makes room at path, the log a start is about to append to, when
// the regular file there is larger than limit bytes: path.keep is dropped,
// each path.N becomes path.N+1, and path becomes path.1, so that the start
// opens a new, empty path. limit <= 0 never rotates. It renames names only:
// a symlink at one of them is moved or replaced as a name, and its target is
// never opened; a path that is not a regular file (a symlink too) is left
// for OpenLog to refuse. A process still writing to the log it was given
// writes on to path.1. The caller serialises rotations (Start holds its
// start lock). The error is the first rename that failed (an
// *os.LinkError), what was renamed before it staying renamed.
func RotateLog(path string, limit int64, keep int) error {
	fi, err := os.Lstat(path)
	if limit <= 0 || keep < 1 || err != nil || !fi.Mode().IsRegular() || fi.Size() <= limit {
		return nil
	}
	for n := keep - 1; n >= 1; n-- {
		err := os.Rename(path+"."+strconv.Itoa(n), path+"."+strconv.Itoa(n+1))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return os.Rename(path, path+".1")
}

// TakeReadiness returns the readiness descriptor this process was given by
// the caller that started it and what it is ready for, and removes both
// variables from the environment so that no process this one starts
// mistakes one of its own descriptors for it. The descriptor is made close-on-exec; it is nil
// when there is none (always, on Windows), or when the number names no
// pipe. What the process is ready for is returned whenever the caller
// named it, "" otherwise.
func TakeReadiness() (*os.File, string) {
	fdStr, ok := os.LookupEnv(ReadyFDEnv)
	readyFor := os.Getenv(ReadyForEnv)
	os.Unsetenv(ReadyFDEnv)
	os.Unsetenv(ReadyForEnv)
	if !ok {
		return nil, readyFor
	}
	fd, err := strconv.Atoi(fdStr)
	if err != nil || fd < 3 {
		return nil, readyFor
	}
	return readinessFile(fd), readyFor
}

// SignalReady writes one byte to f, the readiness descriptor, and closes it.
func SignalReady(f *os.File) error {
	_, err := f.Write([]byte{'1'})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
