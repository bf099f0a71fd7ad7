//go:build linux

package runnerstate

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/stretchr/testify/require"
)

// What only Linux lets the portable tests do; helper_nolinux_test.go has
// the answers elsewhere.

// canInjectLockErrors: flock(2) can be made to fail with the errors the
// kernel gives only on filesystems the tests cannot mount (NFS without
// lockd, some FUSE).
const canInjectLockErrors = true

// injectFlockError makes every flock(2) fail with errno until restore is
// called.
func injectFlockError(errno error) (restore func()) { return filelock.SetFlockFault(errno) }

// mkfifo makes a FIFO at path.
func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }

// canSeeBlockedWaiters: the kernel lists the processes blocked on a lock.
const canSeeBlockedWaiters = true

// blockedOn counts the processes the kernel lists as blocked in flock(2) on
// the file at path: proof that a waiter really waits in the kernel, not in a
// sleep loop of its own.
func blockedOn(t testing.TB, path string) int {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	data, err := os.ReadFile("/proc/locks")
	require.NoError(t, err)
	suffix := ":" + strconv.FormatUint(st.Ino, 10)
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		// "1: -> FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
		if len(f) >= 7 && f[1] == "->" && f[2] == "FLOCK" && strings.HasSuffix(f[6], suffix) {
			n++
		}
	}
	return n
}

// ownProcessGroup makes cmd's process the leader of a process group of its
// own, so that a signal to the group would reach it.
func ownProcessGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// jsonLine marshals v as one line of JSON ended by "\n".
func jsonLine(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
