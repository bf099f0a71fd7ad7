//go:build unix

package daemon

import (
	"bufio"
	"context"
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
// queued as the server leaves idle (here its accept loop runs late, from
// its leaving on) is handed to Accept before Leaving closes, and a server
// that follows the package doc (ServeHTTP) answers it, its request sent
// late too.
func TestIdleExitAnswersAConnectionThatArrivesAsItLeaves(t *testing.T) {
	dir := shortDir(t)
	s := startHTTP(t, dir, Options{Program: "idxd", Endpoints: unixEndpoint("d.sock"), IdleTimeout: 100 * time.Millisecond})
	s.Expect("listening")
	// The client connects before the idle clock starts (Ready): its
	// connection waits in the backlog, not accepted, while the clock runs.
	c, err := net.Dial("unix", filepath.Join(dir, "d.sock"))
	require.NoError(t, err)
	defer c.Close()
	s.Send("ready")
	s.Expect("ready")
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

// ServeHTTP stops at once when the server is told RestartNow: a request in
// flight is cut, and it returns nil.
func TestServeHTTPStopsAtOnceWhenToldNow(t *testing.T) {
	dir := testharness.TempDir(t)
	srv, err := Listen(background(t), dir, Options{Program: "idxd", Endpoints: []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:0"}}})
	require.NoError(t, err)
	defer srv.Close()
	require.NoError(t, srv.Ready(nil))
	inHandler, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(inHandler)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})}
	served := make(chan error, 1)
	go func() { served <- ServeHTTP(background(t), srv, hs) }()
	asked := make(chan error, 1)
	go func() {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Get("http://" + srv.Listeners()[0].Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
		}
		asked <- err
	}()
	<-inHandler
	require.NoError(t, runnerstate.RequestRestart(dir, runnerstate.RestartNow))
	select {
	case err := <-served:
		assert.NoError(t, err)
	case <-time.After(testharness.Wait):
		t.Fatal("ServeHTTP did not return")
	}
	assert.Equal(t, runnerstate.RestartNow, srv.Reason())
	assert.Error(t, <-asked, "the request in flight is cut")
}

// ServeHTTP returns nil when its context ends (SIGTERM, say), stopping at
// once; the server is not leaving until Close, which hands the sockets on.
func TestServeHTTPReturnsWhenCtxEnds(t *testing.T) {
	dir := testharness.TempDir(t)
	srv, err := Listen(background(t), dir, Options{Program: "idxd", Endpoints: []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:0"}}})
	require.NoError(t, err)
	require.NoError(t, srv.Ready(nil))
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go func() { served <- ServeHTTP(ctx, srv, hs) }()
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + srv.Listeners()[0].Addr().String() + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(body))
	cancel()
	select {
	case err := <-served:
		assert.NoError(t, err)
	case <-time.After(testharness.Wait):
		t.Fatal("ServeHTTP did not return")
	}
	assert.Empty(t, srv.Reason(), "not leaving until Close")
	require.NoError(t, srv.Close())
	_, held, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.False(t, held)
}

// ServeHTTP's drain answers a request read the instant before Shutdown
// would begin: net/http checks whether it is shutting down after it has
// marked the connection active, and drops the request if so. Here the
// connection, active, waits (up to a second) for a Shutdown to begin.
func TestServeHTTPAnswersARequestReadAsTheDrainBegins(t *testing.T) {
	dir := testharness.TempDir(t)
	srv, err := Listen(background(t), dir, Options{Program: "idxd", Endpoints: []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:0"}}})
	require.NoError(t, err)
	defer srv.Close()
	require.NoError(t, srv.Ready(nil))
	accepted, shutdown := make(chan struct{}), make(chan struct{})
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	hs.RegisterOnShutdown(func() { close(shutdown) })
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			close(accepted)
		case http.StateActive:
			select {
			case <-shutdown:
			case <-time.After(time.Second):
			}
		}
	}
	served := make(chan error, 1)
	go func() { served <- ServeHTTP(background(t), srv, hs) }()
	c, err := net.Dial("tcp", srv.Listeners()[0].Addr().String())
	require.NoError(t, err)
	defer c.Close()
	<-accepted
	require.NoError(t, runnerstate.RequestRestart(dir, runnerstate.RestartDrain))
	<-srv.Leaving()
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: idxd\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	c.SetDeadline(time.Now().Add(testharness.Wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "answered, not dropped")
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "ok", string(body))
	require.NoError(t, <-served)
}
