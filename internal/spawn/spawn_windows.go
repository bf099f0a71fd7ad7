//go:build windows

package spawn

import (
	"github.com/runnerstate/runnerstate/internal/durable"
	"os"
	"os/exec"
	"syscall"
)

// canPassFiles is false: os/exec cannot pass extra descriptors on Windows,
// so a started process gets no readiness descriptor there, and its caller
// watches the directory instead.
const canPassFiles = false

// detachedProcess is DETACHED_PROCESS: the process gets no console.
const detachedProcess = 0x00000008

// detach starts cmd's process in a new process group, detached from the
// caller's console.
func detach(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= syscall.CREATE_NEW_PROCESS_GROUP | detachedProcess
	return nil
}

// markCloseOnExec does nothing: os/exec on Windows hands the new process
// only the handles it lists.
func markCloseOnExec() {}

func exitCode(ps *os.ProcessState) int { return ps.ExitCode() }

func readinessFile(int) *os.File { return nil }

// OpenLog opens path for appending, creating it, after checking that no
// symlink or other non-regular file is there, and returns it with its size
// now. Errors are *fs.PathError naming path.
func OpenLog(path string) (*os.File, int64, error) {
	if fi, err := os.Lstat(path); err == nil {
		if err := durable.CheckMode(path, fi.Mode()); err != nil {
			return nil, 0, err
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if err := durable.CheckMode(path, fi.Mode()); err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}
