package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A listening socket handed over is one open file description, shared by
// every process that holds it. net.FileListener in a receiver makes that
// description blocking for an instant (os.File.Fd, before it sets its own
// copy non-blocking again), and a receiver killed in that instant leaves it
// so. A server that accepts on it afterwards (a lingering server that took
// the directory back from such a successor, or one beside such a receiver)
// then waits in accept4 itself, where no deadline reaches: asked to go, it
// halts its listeners, waits for that Accept until a connection comes, and
// Leaving never closes, nothing is handed over, until an escalation kills
// it. TestChaos met it twice in about 60 runs (a server retaken, then asked
// to go now). This test leaves the description blocking as such a receiver
// would (pidfd_getfd), then asks the server to go now.
func TestLeavingIsNotHeldByAnAcceptInTheKernel(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := startLinger(t, dir, lingerOpts("v1.0.0", 0))
	a.Expect("listening")
	a.Expect("ready inherited=0")
	fd := listeningSocketOf(t, a.PID(), path)
	require.NoError(t, unix.SetNonblock(fd, false), "as a receiver killed inside net.FileListener leaves it")
	unix.Close(fd)
	// A connection wakes the accept loop, which calls accept4 again: on a
	// blocking description it waits in the kernel now.
	pingPID(t, path)
	require.NoError(t, runnerstate.RequestRestart(dir, runnerstate.RestartNow))
	a.Expect("leaving now")
	a.Expect("idle")
	a.Expect("closed")
}

// listeningSocketOf is a duplicate (pidfd_getfd) of the listening unix
// socket at path that process pid holds: the same open file description.
func listeningSocketOf(t *testing.T, pid int, path string) int {
	t.Helper()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	require.NoError(t, err)
	for _, e := range fds {
		link, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", e.Name()))
		if !strings.HasPrefix(link, "socket:") {
			continue
		}
		n, _ := strconv.Atoi(e.Name())
		fd, err := unix.PidfdGetfd(pidfd, n, 0)
		if err != nil {
			t.Skipf("pidfd_getfd: %v", err)
		}
		listening, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
		if sa, _ := unix.Getsockname(fd); listening == 1 {
			if ua, ok := sa.(*unix.SockaddrUnix); ok && ua.Name == path {
				return fd
			}
		}
		unix.Close(fd)
	}
	t.Fatalf("process %d holds no socket listening at %s", pid, path)
	return -1
}
