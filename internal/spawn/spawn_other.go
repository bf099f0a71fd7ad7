//go:build !unix && !windows

package spawn

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
)

const canPassFiles = false

// detach refuses: this system cannot start processes.
func detach(*exec.Cmd) error { return errors.ErrUnsupported }

func markCloseOnExec() {}

func exitCode(ps *os.ProcessState) int { return ps.ExitCode() }

func readinessFile(int) *os.File { return nil }

// OpenLog refuses: this system cannot start processes.
func OpenLog(path string) (*os.File, int64, error) {
	return nil, 0, &fs.PathError{Op: "open", Path: path, Err: errors.ErrUnsupported}
}
