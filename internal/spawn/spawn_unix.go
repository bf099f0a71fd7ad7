//go:build unix

package spawn

import (
	"io/fs"

	"github.com/runnerstate/runnerstate/internal/durable"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
)

const canPassFiles = true

// detach puts cmd's process in a session of its own: Setsid, and none of
// the attributes that would tie it to the caller's terminal or process
// group.
func detach(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	a := cmd.SysProcAttr
	a.Setsid = true
	a.Setpgid = false
	a.Setctty = false
	a.Foreground = false
	return nil
}

// markCloseOnExec sets FD_CLOEXEC on every descriptor of this process above
// stderr, under syscall.ForkLock so that no descriptor opened by the rules
// (with the lock read-held while it is made and marked) is caught half-way.
// The descriptors are listed from /proc/self/fd (Linux) or /dev/fd.
func markCloseOnExec() {
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	dir := "/dev/fd"
	if runtime.GOOS == "linux" {
		dir = "/proc/self/fd"
	}
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd <= 2 {
			continue
		}
		syscall.CloseOnExec(fd)
	}
}

// exitCode is ps's exit code, or 128+n when signal n ended the process.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// readinessFile is fd as the readiness descriptor, close-on-exec, when it is
// a pipe; else nil.
func readinessFile(fd int) *os.File {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "readiness")
}

// OpenLog opens path for appending, creating it 0600, never through a
// symlink and never blocking on a FIFO, and returns it with its size now
// (where this attempt's output begins). Errors are *fs.PathError naming
// path: durable's sentinels for a symlink, a directory or another
// non-regular file; otherwise the system's error.
func OpenLog(path string) (*os.File, int64, error) {
	fd, err := durable.OpenRetry(path, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CREAT|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return nil, 0, durable.OpenError(path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, &fs.PathError{Op: "stat", Path: path, Err: durable.Unwrap(err)}
	}
	if err := durable.CheckMode(path, fi.Mode()); err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}
