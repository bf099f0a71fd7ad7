//go:build unix

package daemon

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startHTTP starts the role "http" on dir with opts.
func startHTTP(t *testing.T, dir string, opts Options) *testharness.Child {
	t.Helper()
	data, _ := json.Marshal(opts)
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), envServerOptions+"="+string(data))
	return testharness.StartCmd(t, cmd, "http")
}

// Point 5: an idle exit never drops a connection the kernel accepted. One
// that arrives as the server leaves idle (queued, while the server's accept
// loop runs late) is handed to Accept before Leaving closes, and a server
// that follows the package doc answers it.
func TestIdleExitAnswersAConnectionThatArrivesAsItLeaves(t *testing.T) {
	dir := shortDir(t)
	s := startHTTP(t, dir, Options{Program: "idxd", Endpoints: unixEndpoint("d.sock"), IdleTimeout: 100 * time.Millisecond})
	s.Expect("ready")
	c, err := net.Dial("unix", filepath.Join(dir, "d.sock"))
	require.NoError(t, err)
	defer c.Close()
	testharness.Eventually(t, "the server leaves idle", func() bool {
		rec, _, _ := runnerstate.Running(dir)
		return rec.Leaving == ReasonIdle
	})
	s.Send("serve")
	s.Expect("leaving idle")
	// A slow client: its request comes 300 ms after its connect, long after
	// a server that stops at once has gone (a workload, not a wait for an
	// event: the server must answer whenever, within net/http's 5 s).
	time.Sleep(300 * time.Millisecond)
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: idxd\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	c.SetDeadline(time.Now().Add(testharness.Wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "the connection is answered, never dropped")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(body))
	s.Expect("closed idle")
	require.NoError(t, s.Wait())
	_, err = os.Lstat(filepath.Join(dir, "d.sock"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the socket file is gone: the next client starts a server")
}
