//go:build unix

package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/require"
)

// serverCmd is the command that plays a server of dir with opts.
func serverCmd(dir string, opts Options) *exec.Cmd {
	data, _ := json.Marshal(opts)
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"=server", envServerOptions+"="+string(data), "GORACE=atexit_sleep_ms=0")
	return cmd
}

// startServer starts a server of dir with opts, killed and reaped when the
// test ends.
func startServer(t *testing.T, dir string, opts Options) *testharness.Child {
	t.Helper()
	data, _ := json.Marshal(opts)
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), envServerOptions+"="+string(data))
	return testharness.StartCmd(t, cmd, "server")
}

// ping sends one ping over c and returns the answer line.
func ping(c net.Conn, line string) (string, error) {
	c.SetDeadline(time.Now().Add(testharness.Wait))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

// shortDir is a temporary directory whose socket paths fit sun_path.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "rsd")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
