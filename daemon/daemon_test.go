//go:build unix

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of package daemon, one or more per numbered point of its contract,
// with real server processes where two servers meet.

// Point 3: until Ready the record says Ready false with Program, Version
// and the Endpoints as bound; Ready publishes them with Ready true.
func TestListenPublishesStartingThenReady(t *testing.T) {
	dir := shortDir(t)
	srv, err := Listen(background(t), dir, Options{Program: "idxd", Version: "v1.2.0",
		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "d.sock"}, {Network: "tcp", Address: "127.0.0.1:0"}}})
	require.NoError(t, err)
	defer srv.Close()
	rec, held, err := runnerstate.Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.False(t, rec.Ready, "the admission record until Ready")
	assert.Equal(t, "idxd", rec.Program)
	assert.Equal(t, "v1.2.0", rec.Version)
	require.Len(t, rec.Endpoints, 2)
	assert.Equal(t, filepath.Join(dir, "d.sock"), rec.Endpoints[0].Address, "a unix socket's absolute path")
	assert.NotEqual(t, "127.0.0.1:0", rec.Endpoints[1].Address, "the port picked")
	assert.Len(t, srv.Listeners(), 2)

	require.NoError(t, srv.Ready([]byte(`{"k":1}`)))
	rec, _, err = runnerstate.Running(dir)
	require.NoError(t, err)
	assert.True(t, rec.Ready)
	assert.JSONEq(t, `{"k":1}`, string(rec.Meta))
	assert.Equal(t, "idxd", rec.Program)
}

// Point 4 and 12: Stop asks the server to go and returns once it let the
// directory go; its record says leaving before its Leaving closes.
func TestStopDrainsAndReturnsOnceLetGo(t *testing.T) {
	dir := shortDir(t)
	s := startServer(t, dir, Options{Program: "idxd", Endpoints: unixEndpoint("d.sock")})
	s.Expect("ready inherited=0")
	require.NoError(t, Stop(background(t), dir, ""))
	s.Expect("leaving drain")
	s.Expect("closed")
	_, held, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.False(t, held)
	_, err = os.Lstat(filepath.Join(dir, "d.sock"))
	assert.ErrorIs(t, err, os.ErrNotExist, "Close removed its own socket file")

	require.NoError(t, Stop(background(t), dir, runnerstate.RestartNow), "nothing holds it: nil at once")
	assert.ErrorIs(t, Stop(background(t), dir, "soon"), runnerstate.ErrBadMode)
}

// Point 12: an operator's Stop made while a takeover waits for a frozen
// server stands when the takeover gives up: the server, continued, leaves
// (the takeover withdraws only its own request).
func TestStopStandsWhenATakeoverGivesUp(t *testing.T) {
	dir := shortDir(t)
	s := startServer(t, dir, Options{Program: "idxd", Endpoints: unixEndpoint("d.sock")})
	s.Expect("ready inherited=0")
	pid := s.PID()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	lctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listened := make(chan error, 1)
	go func() {
		srv, err := Listen(lctx, dir, Options{Program: "idxd", Endpoints: unixEndpoint("d.sock")})
		if err == nil {
			srv.Close()
		}
		listened <- err
	}()
	testharness.Eventually(t, "the takeover waits, its request left", func() bool {
		st, err := runnerstate.Status(dir)
		return err == nil && len(st.Waiting) == 1 && st.Restart == runnerstate.RestartDrain
	})
	// The operator's Stop joins the takeover's request (its request is
	// the operator's from then on), then gives up waiting for the frozen
	// server: its context ends once restart.json names it, however long a
	// loaded machine took to write it.
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	stopped := make(chan error, 1)
	go func() { stopped <- Stop(sctx, dir, runnerstate.RestartDrain) }()
	testharness.Eventually(t, "the operator's Stop made the request its own", func() bool {
		var req struct {
			By       runnerstate.Identity `json:"by"`
			Takeover bool                 `json:"takeover"`
		}
		data, err := os.ReadFile(filepath.Join(dir, runnerstate.RestartName))
		return err == nil && json.Unmarshal(data, &req) == nil && req.By.PID == os.Getpid() && !req.Takeover
	})
	scancel()
	require.ErrorIs(t, <-stopped, context.Canceled, "the frozen server does not go")
	cancel()
	require.ErrorIs(t, <-listened, context.Canceled)
	st, err := runnerstate.Status(dir)
	require.NoError(t, err)
	assert.Equal(t, runnerstate.RestartDrain, st.Restart, "the operator's request stands")
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	s.Expect("leaving drain")
	s.Expect("closed")
	require.NoError(t, s.Wait())
}

// Point 11: a new build whose endpoint cannot bind never takes the place
// of the server there: it is refused before the takeover, and the server
// is not asked to go.
func TestAnEndpointThatCannotBindLeavesTheServer(t *testing.T) {
	dir := shortDir(t)
	s := startServer(t, dir, Options{Program: "idxd", Endpoints: []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:0"}}})
	s.Expect("ready inherited=0")
	for _, addr := range []string{"127.0.0.1:99999", "192.0.2.1:0"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := Listen(ctx, dir, Options{Program: "idxd", Endpoints: []runnerstate.Endpoint{{Network: "tcp", Address: addr}}})
		cancel()
		require.Error(t, err, addr)
		assert.Contains(t, err.Error(), addr)
	}
	st, err := runnerstate.Status(dir)
	require.NoError(t, err)
	assert.Empty(t, st.Restart, "the server is not asked to go")
	rec, held, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.True(t, held && rec.Ready && rec.PID == s.PID(), "it serves on")
	require.NoError(t, Stop(background(t), dir, runnerstate.RestartNow))
	s.Expect("leaving now")
}

// Point 12: a Stop whose ctx ends first names the holder; it never signals.
func TestStopEndsWithCtxNamingTheHolder(t *testing.T) {
	dir := shortDir(t)
	srv, err := Listen(background(t), dir, Options{Endpoints: unixEndpoint("d.sock")})
	require.NoError(t, err)
	defer srv.Close()
	require.NoError(t, srv.Ready(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = Stop(ctx, dir, runnerstate.RestartDrain) // this process holds it, and does not go
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "pid "+strconv.Itoa(os.Getpid()))
	<-srv.Leaving()
	assert.Equal(t, runnerstate.RestartDrain, srv.Reason())
}

// Point 4: a server told to go is marked leaving before its Leaving
// closes, from then on its listeners return no connection, and it is never
// ready again.
func TestLeavingStopsAcceptAndMarksTheRecord(t *testing.T) {
	dir := shortDir(t)
	srv, err := Listen(background(t), dir, Options{Endpoints: unixEndpoint("d.sock")})
	require.NoError(t, err)
	defer srv.Close()
	require.NoError(t, srv.Ready(nil))
	ln := srv.Listeners()[0]
	accepted := make(chan error, 1)
	go func() {
		_, err := ln.Accept() // blocked when Leaving closes
		accepted <- err
	}()
	require.NoError(t, runnerstate.RequestRestart(dir, runnerstate.RestartNow))
	select {
	case <-srv.Leaving():
	case <-time.After(testharness.Wait):
		t.Fatal("Leaving never closed")
	}
	rec, _, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.Equal(t, runnerstate.RestartNow, rec.Leaving, "marked before Leaving closed")
	assert.False(t, rec.Ready)
	assert.ErrorIs(t, <-accepted, net.ErrClosed)
	_, err = ln.Accept()
	assert.ErrorIs(t, err, net.ErrClosed)

	// The socket stays open for a successor: a client waits in its backlog.
	c, err := net.Dial("unix", filepath.Join(dir, "d.sock"))
	require.NoError(t, err, "queued, not refused")
	c.Close()
	require.NoError(t, ln.Close(), "after Leaving, Close only ends Accept")
	require.NoError(t, srv.Ready(nil))
	rec, _, _ = runnerstate.Running(dir)
	assert.False(t, rec.Ready, "never ready again")
}

// Point 5: an idle server leaves (Reason "idle"): its record says so, its
// socket file goes first, then Leaving closes.
func TestIdleServerLeaves(t *testing.T) {
	dir := shortDir(t)
	srv, err := Listen(background(t), dir, Options{Endpoints: unixEndpoint("d.sock"), IdleTimeout: 30 * time.Millisecond})
	require.NoError(t, err)
	defer srv.Close()
	// A connection open holds the idle clock off.
	go func() {
		for {
			c, err := srv.Listeners()[0].Accept()
			if err != nil {
				return
			}
			go func() { ping(c, "x"); c.Close() }()
		}
	}()
	require.NoError(t, srv.Ready(nil))
	done := srv.Busy()
	select {
	case <-srv.Leaving():
		t.Fatal("left while Busy")
	case <-time.After(100 * time.Millisecond): // three IdleTimeouts: it must not leave
	}
	done()
	done() // a second call does nothing
	select {
	case <-srv.Leaving():
	case <-time.After(testharness.Wait):
		t.Fatal("an idle server never left")
	}
	assert.Equal(t, ReasonIdle, srv.Reason())
	rec, _, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.Equal(t, ReasonIdle, rec.Leaving)
	_, err = os.Lstat(filepath.Join(dir, "d.sock"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the socket file is removed before Leaving closes")
}

// Point 1: a server B taking dir over from a server A that serves through
// Listen inherits A's listening socket; a client that dials all through
// the handover is never refused, and each request is answered.
func TestHandoverNeverRefusesAClient(t *testing.T) {
	if !handsOver {
		t.Skip("this platform binds anew")
	}
	dir := shortDir(t)
	opts := Options{Program: "echo", Version: "v1.0.0", Endpoints: unixEndpoint("d.sock"), Mode: runnerstate.RestartNow}
	a := startServer(t, dir, opts)
	a.Expect("ready inherited=0")
	path := filepath.Join(dir, "d.sock")

	var refused, answered atomic.Int64
	var answers sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("unix", path)
				if err != nil {
					refused.Add(1)
					t.Errorf("dial refused during the handover: %v", err)
					return
				}
				line, err := ping(c, "ping")
				c.Close()
				if err != nil {
					t.Errorf("a connection was not answered: %v", err)
					return
				}
				answered.Add(1)
				answers.Store(strings.Fields(line)[1], true)
			}
		})
	}
	opts.Version = "v1.1.0"
	b := startServer(t, dir, opts)
	a.Expect("leaving now")
	a.Expect("closed")
	b.Expect("ready inherited=1")
	// Some requests answered by the new server, then stop.
	n := answered.Load()
	for deadline := time.Now().Add(testharness.Wait); answered.Load() < n+20 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	assert.Zero(t, refused.Load())
	_, byB := answers.Load(strconv.Itoa(b.PID()))
	assert.True(t, byB, "the new server answered")
	rec, _, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.Equal(t, "v1.1.0", rec.Version)
	assert.Equal(t, path, rec.Endpoints[0].Address)
}

// Point 2: a server killed hands nothing over; the next one replaces its
// dead socket file and binds anew.
func TestAfterAKillTheNextServerBindsAnew(t *testing.T) {
	dir := shortDir(t)
	opts := Options{Endpoints: unixEndpoint("d.sock")}
	a := startServer(t, dir, opts)
	a.Expect("ready inherited=0")
	a.Kill()
	a.Wait()
	b := startServer(t, dir, opts)
	b.Expect("ready inherited=0")
	c, err := net.Dial("unix", filepath.Join(dir, "d.sock"))
	require.NoError(t, err)
	line, err := ping(c, "ping")
	c.Close()
	require.NoError(t, err)
	assert.Contains(t, line, "pong "+strconv.Itoa(b.PID()))
}

// Point 2: a path that is not a socket is refused naming it, and dir is
// let go.
func TestANonSocketPathIsRefused(t *testing.T) {
	dir := shortDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.sock"), []byte("mine"), 0o644))
	_, err := Listen(background(t), dir, Options{Endpoints: unixEndpoint("d.sock")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "d.sock"))
	assert.Contains(t, err.Error(), "not a socket")
	_, held, _ := runnerstate.Running(dir)
	assert.False(t, held, "dir let go")
	data, _ := os.ReadFile(filepath.Join(dir, "d.sock"))
	assert.Equal(t, "mine", string(data), "untouched")
}

// Point 8: with a nil cmd and nothing there, ErrNotRunning; a ready runner
// that publishes no Endpoints is an error at once naming it.
func TestDialWithoutAServer(t *testing.T) {
	dir := shortDir(t)
	_, _, err := Dial(background(t), dir, nil, DialOptions{})
	assert.ErrorIs(t, err, ErrNotRunning)

	release, err := runnerstate.Acquire(dir)
	require.NoError(t, err)
	defer release()
	require.NoError(t, runnerstate.Publish(dir, runnerstate.Record{Specs: []string{"plain"}}))
	_, _, err = Dial(background(t), dir, nil, DialOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the holder (pid")
	assert.Contains(t, err.Error(), "published no Endpoints")
}

// Point 8: a refusal from a ready server that is not leaving returns at
// once, naming the endpoint.
func TestDialRefusedByAReadyServerReturns(t *testing.T) {
	dir := shortDir(t)
	release, err := runnerstate.Acquire(dir)
	require.NoError(t, err)
	defer release()
	gone := filepath.Join(dir, "gone.sock")
	require.NoError(t, runnerstate.Publish(dir, runnerstate.Record{Endpoints: unixEndpoint(gone)}))
	_, _, err = Dial(background(t), dir, nil, DialOptions{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.ENOENT), "%v", err)
	assert.Contains(t, err.Error(), gone)
}

// Point 7: concurrent Dials on an empty directory start exactly one
// server, and all get a connection to it.
func TestConcurrentDialsStartOneServer(t *testing.T) {
	dir := shortDir(t)
	cmd := serverCmd(dir, Options{Program: "echo", Version: "v1.0.0", Endpoints: unixEndpoint("d.sock")})
	const n = 10
	pids := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, rec, err := Dial(background(t), dir, cmd, DialOptions{Program: "echo", Version: "v1.0.0"})
			if !assert.NoError(t, err) {
				return
			}
			line, err := ping(c, "ping")
			c.Close()
			assert.NoError(t, err)
			assert.Contains(t, line, "pong "+strconv.Itoa(rec.PID))
			pids <- strings.Fields(line)[1]
		})
	}
	wg.Wait()
	close(pids)
	seen := map[string]bool{}
	for p := range pids {
		seen[p] = true
	}
	assert.Len(t, seen, 1, "one server")
	t.Cleanup(func() { Stop(context.Background(), dir, runnerstate.RestartNow) })
}

// Point 9: a newer client replaces an older server once; an older client
// then uses the newer server; Accept is asked only of a server that is not
// older, and its refusal is ErrIncompatible naming both versions.
func TestVersionsReplaceOnceNeverBack(t *testing.T) {
	dir := shortDir(t)
	eps := unixEndpoint("d.sock")
	old := startServer(t, dir, Options{Program: "echo", Version: "v1.0.0", Endpoints: eps})
	old.Expect("ready inherited=0")
	t.Cleanup(func() { Stop(context.Background(), dir, runnerstate.RestartNow) })

	newCmd := serverCmd(dir, Options{Program: "echo", Version: "v1.1.0", Endpoints: eps})
	var asked []string
	c, rec, err := Dial(background(t), dir, newCmd, DialOptions{Program: "echo", Version: "1.1.0",
		Accept: func(r runnerstate.Record) bool { asked = append(asked, r.Version); return true }})
	require.NoError(t, err)
	c.Close()
	assert.Equal(t, "v1.1.0", rec.Version, "replaced by the newer")
	assert.Equal(t, []string{"v1.1.0"}, asked, "Accept is never asked of an older server")
	old.Expect("leaving drain")

	oldCmd := serverCmd(dir, Options{Program: "echo", Version: "v1.0.0", Endpoints: eps})
	c, rec2, err := Dial(background(t), dir, oldCmd, DialOptions{Program: "echo", Version: "v1.0.0"})
	require.NoError(t, err)
	c.Close()
	assert.Equal(t, rec.Process.Instance, rec2.Process.Instance, "an older client uses the newer server: no ping-pong")

	_, _, err = Dial(background(t), dir, oldCmd, DialOptions{Program: "echo", Version: "v1.0.0",
		Accept: func(runnerstate.Record) bool { return false }})
	require.ErrorIs(t, err, ErrIncompatible)
	assert.Contains(t, err.Error(), "v1.1.0")
	assert.Contains(t, err.Error(), "v1.0.0")

	_, _, err = Dial(background(t), dir, nil, DialOptions{Version: "v2.0.0"})
	assert.ErrorIs(t, err, ErrIncompatible, "a nil cmd cannot replace an older server")
}

// Point 9: a server that Dial started steps aside for a newer server of
// its program that holds the directory, and for one of its own version.
func TestDialStartedServerStepsAside(t *testing.T) {
	dir := shortDir(t)
	eps := unixEndpoint("d.sock")
	newer := startServer(t, dir, Options{Program: "echo", Version: "v2.0.0", Endpoints: eps})
	newer.Expect("ready inherited=0")
	t.Cleanup(func() { Stop(context.Background(), dir, runnerstate.RestartNow) })
	cmd := serverCmd(dir, Options{Program: "echo", Version: "v1.0.0", Endpoints: eps})
	cmd.Env = append(cmd.Env, envYield+"=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "stepped aside for a newer server")
	assert.Contains(t, string(out), "v2.0.0")
	rec, _, _ := runnerstate.Running(dir)
	assert.Equal(t, "v2.0.0", rec.Version)
	assert.Empty(t, rec.Leaving, "the newer server was not asked to go")

	// Nor does one of the same version bounce a server a deploy started
	// (a restart to apply new flags is not undone by a client).
	same := serverCmd(dir, Options{Program: "echo", Version: "v2.0.0", Endpoints: eps})
	same.Env = append(same.Env, envYield+"=1")
	out, err = same.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "stepped aside")
	rec, _, _ = runnerstate.Running(dir)
	assert.Equal(t, newer.PID(), rec.PID)
	assert.Empty(t, rec.Leaving, "the deployed server was not asked to go")
}

// Point 10: a server of another program is never used nor replaced.
func TestAnotherProgramIsRefused(t *testing.T) {
	dir := shortDir(t)
	s := startServer(t, dir, Options{Program: "idxd", Endpoints: unixEndpoint("d.sock")})
	s.Expect("ready inherited=0")
	t.Cleanup(func() { Stop(context.Background(), dir, runnerstate.RestartNow) })
	_, _, err := Dial(background(t), dir, serverCmd(dir, Options{Program: "syncd", Endpoints: unixEndpoint("d.sock")}), DialOptions{Program: "syncd"})
	require.ErrorIs(t, err, runnerstate.ErrOtherProgram)
	require.ErrorIs(t, err, runnerstate.ErrBusy)
	_, err = Listen(background(t), dir, Options{Program: "syncd", Endpoints: unixEndpoint("e.sock")})
	require.ErrorIs(t, err, runnerstate.ErrOtherProgram)
	_, asked := runnerstate.RestartRequested(dir)
	assert.False(t, asked)
}

// Point 1, several successors: a starter that received the sockets and is
// then superseded passes them on; the newest is admitted with them, and a
// client is never refused meanwhile.
func TestHandoverReachesTheNewestOfSeveralSuccessors(t *testing.T) {
	if !handsOver {
		t.Skip("this platform binds anew")
	}
	dir := shortDir(t)
	opts := Options{Program: "echo", Version: "v1.0.0", Endpoints: unixEndpoint("d.sock")}
	a := startServer(t, dir, opts)
	a.Expect("ready inherited=0")
	path := filepath.Join(dir, "d.sock")
	// A request in flight holds A's drain.
	slow, err := net.Dial("unix", path)
	require.NoError(t, err)
	defer slow.Close()
	slowAnswer := make(chan string, 1)
	go func() { line, _ := ping(slow, "slow"); slow.Close(); slowAnswer <- line }()

	b1 := startServer(t, dir, opts)
	a.Expect("leaving drain")
	b2 := startServer(t, dir, opts)
	b1.Expect("error ") // superseded by b2
	assert.Equal(t, 4, exitCode(b1), "b1 was superseded")

	// Connections made now wait in the backlog, for b2.
	waiting, err := net.Dial("unix", path)
	require.NoError(t, err, "not refused while the servers change")
	defer waiting.Close()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "answer"), nil, 0o644))
	assert.Contains(t, <-slowAnswer, "pong "+strconv.Itoa(a.PID()), "A finished what was in flight")
	a.Expect("closed")
	b2.Expect("ready inherited=1")
	line, err := ping(waiting, "ping")
	require.NoError(t, err)
	assert.Contains(t, line, "pong "+strconv.Itoa(b2.PID()), "accepted by the newest, from the backlog")
}

// exitCode waits for c's exit and returns its code.
func exitCode(c *testharness.Child) int {
	c.Wait()
	return c.Cmd.ProcessState.ExitCode()
}

// Point 2: a unix socket path where something else answers is refused,
// after about a second's wait for a handover, naming the path; dir is let
// go.
func TestALivePathIsRefused(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	other, err := net.Listen("unix", path)
	require.NoError(t, err)
	defer other.Close()
	_, err = Listen(background(t), dir, Options{Endpoints: unixEndpoint("d.sock")})
	require.ErrorIs(t, err, errAlive)
	assert.Contains(t, err.Error(), path)
	_, held, _ := runnerstate.Running(dir)
	assert.False(t, held, "dir let go")
	c, err := net.Dial("unix", path)
	require.NoError(t, err, "the other's socket is untouched")
	c.Close()
}

// A server whose build fails at start is not started again and again:
// after two consecutive failures, Dial returns the last one's
// *runnerstate.StartError at once, saying when the next start comes, and
// starts nothing (Start's backoff across callers).
func TestDialBacksOffAFailingServer(t *testing.T) {
	dir := shortDir(t)
	cmd := serverCmd(dir, Options{Program: "echo"}) // no Endpoints: Listen refuses, exit 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, err := Dial(ctx, dir, cmd, DialOptions{Program: "echo"})
	var se *runnerstate.StartError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 3, se.ExitCode)
	assert.Equal(t, 2, se.Failures, "the second copy's failure opens the window")
	assert.Equal(t, 2, attemptSeq(t, dir))
	// NoBackoff starts one copy at once; three more failures make the
	// window 2 s long, time enough for a loaded machine.
	for k := 3; k <= 5; k++ {
		_, _, err = Dial(ctx, dir, cmd, DialOptions{Program: "echo", NoBackoff: true})
		require.ErrorAs(t, err, &se)
		require.Equal(t, k, se.Failures)
	}
	seq := attemptSeq(t, dir)
	assert.Equal(t, 5, seq)

	began := time.Now()
	_, _, err = Dial(ctx, dir, cmd, DialOptions{Program: "echo"})
	took := time.Since(began)
	require.ErrorAs(t, err, &se)
	require.True(t, began.Before(se.RetryAt), "the test's Dial came in the window")
	assert.Equal(t, 5, se.Failures)
	assert.Contains(t, se.Error(), "no runner is started before")
	assert.Contains(t, se.Error(), "no Endpoints", "why, from the log")
	assert.Equal(t, seq, attemptSeq(t, dir), "nothing started in the window")
	t.Logf("Dial in the window answered in %s", took)

	// Without a command: not running, and how the last one ended.
	_, _, err = Dial(ctx, dir, nil, DialOptions{Program: "echo"})
	require.ErrorIs(t, err, ErrNotRunning)
	assert.Contains(t, err.Error(), "ended: exit 3 at")
	assert.Contains(t, err.Error(), "no Endpoints")
}

// The backoff holds where Start would replace a ready server that the
// client refuses (older than its Version): a newer build that fails at
// start is started twice, then every Dial in the window is told the last
// failure at once, and nothing more is started, while the older server
// keeps serving.
func TestDialBacksOffBesideAnOlderServer(t *testing.T) {
	dir := shortDir(t)
	eps := unixEndpoint("d.sock")
	old := startServer(t, dir, Options{Program: "echo", Version: "v1.0.0", Endpoints: eps})
	old.Expect("ready inherited=0")
	t.Cleanup(func() { Stop(context.Background(), dir, runnerstate.RestartNow) })
	cmd := serverCmd(dir, Options{Program: "echo", Version: "v2.0.0"}) // no Endpoints: Listen refuses, exit 3
	newer := DialOptions{Program: "echo", Version: "v2.0.0"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, _, err := Dial(ctx, dir, cmd, newer)
	var se *runnerstate.StartError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 3, se.ExitCode)
	assert.Equal(t, 2, se.Failures, "the second copy's failure opens the window")
	assert.Equal(t, 2, attemptSeq(t, dir))
	// Three more (NoBackoff) make the window 2 s long.
	for k := 3; k <= 5; k++ {
		_, _, err = Dial(ctx, dir, cmd, DialOptions{Program: "echo", Version: "v2.0.0", NoBackoff: true})
		require.ErrorAs(t, err, &se)
		require.Equal(t, k, se.Failures)
	}
	require.Equal(t, 5, attemptSeq(t, dir))

	for range 3 {
		began := time.Now()
		_, _, err = Dial(ctx, dir, cmd, newer)
		took := time.Since(began)
		require.ErrorAs(t, err, &se)
		require.True(t, began.Before(se.RetryAt), "the test's Dial came in the window")
		assert.Equal(t, 5, se.Failures)
		assert.Contains(t, se.Error(), "no Endpoints", "why, from the log")
		assert.Contains(t, se.Error(), "NoBackoff starts one now")
		assert.NotContains(t, se.Error(), "StartOptions", "a Dial user has DialOptions")
		t.Logf("Dial in the window answered in %s", took)
	}
	// Start itself, with an Accept that refuses the holder, is held back too.
	_, err = runnerstate.Start(ctx, dir, cmd, runnerstate.StartOptions{Accept: func(runnerstate.Record) bool { return false }})
	require.ErrorAs(t, err, &se)
	assert.Equal(t, 5, se.Failures)
	assert.Equal(t, 5, attemptSeq(t, dir), "nothing started in the window")

	rec, held, _ := runnerstate.Running(dir)
	require.True(t, held)
	assert.Equal(t, "v1.0.0", rec.Version, "the older server still serves")
}

// attemptSeq is the number of the last Start attempt in dir's start.json.
func attemptSeq(t *testing.T, dir string) int {
	data, err := os.ReadFile(filepath.Join(dir, "start.json"))
	require.NoError(t, err)
	var a struct{ Seq int }
	require.NoError(t, json.Unmarshal(data, &a))
	return a.Seq
}

// A copy that Dial started and that stepped aside for a newer server is no
// failed start: it counts for nothing in Start's backoff, however often.
func TestACopyThatStepsAsideIsNoFailure(t *testing.T) {
	dir := shortDir(t)
	eps := unixEndpoint("d.sock")
	newer := startServer(t, dir, Options{Program: "echo", Version: "v2.0.0", Endpoints: eps})
	newer.Expect("ready inherited=0")
	t.Cleanup(func() { Stop(context.Background(), dir, runnerstate.RestartNow) })
	for range 3 {
		cmd := serverCmd(dir, Options{Program: "echo", Version: "v1.0.0", Endpoints: eps})
		cmd.Env = append(cmd.Env, envYield+"=1")
		// Accept refuses the newer server, so that Start starts the copy.
		_, err := runnerstate.Start(background(t), dir, cmd, runnerstate.StartOptions{Accept: func(runnerstate.Record) bool { return false }})
		var se *runnerstate.StartError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, 4, se.ExitCode, "stepped aside: %v", err)
		assert.Zero(t, se.Failures)
	}
	r, err := runnerstate.Status(dir)
	require.NoError(t, err)
	assert.Zero(t, r.StartFailures, "no failure counted")
	assert.Zero(t, r.NextStart)
	assert.Equal(t, 3, attemptSeq(t, dir))
}

// A copy that Start started and that a newer starter superseded while it
// waited in the gate (an upgrade that came meanwhile) is no failed start
// either: it ran nothing of its own. Counted, two of them in a row made
// every Dial of the next copy fail at once with the backoff's error while
// the newer server was being admitted (TestChaos saw it).
func TestACopySupersededByANewerStarterIsNoFailure(t *testing.T) {
	dir := shortDir(t)
	eps := unixEndpoint("d.sock")
	old := startServer(t, dir, Options{Program: "echo", Version: "v1.0.0", Endpoints: eps})
	old.Expect("ready inherited=0")
	t.Cleanup(func() { Stop(context.Background(), dir, runnerstate.RestartNow) })
	// A request the old server is slow to answer holds its drain.
	rec, _, err := runnerstate.Running(dir)
	require.NoError(t, err)
	slow, err := net.Dial("unix", rec.Endpoints[0].Address)
	require.NoError(t, err)
	defer slow.Close()
	_, err = fmt.Fprintln(slow, "slow")
	require.NoError(t, err)

	cmd := serverCmd(dir, Options{Program: "echo", Version: "v2.0.0", Endpoints: eps})
	cmd.Env = append(cmd.Env, envYield+"=1")
	started := make(chan error, 1)
	go func() {
		_, err := runnerstate.Start(background(t), dir, cmd, runnerstate.StartOptions{Accept: func(r runnerstate.Record) bool { return r.Version != "v1.0.0" }})
		started <- err
	}()
	testharness.Eventually(t, "the copy waiting in the gate", func() bool {
		r, err := runnerstate.Status(dir)
		return err == nil && len(r.Waiting) == 1
	})
	newest := startServer(t, dir, Options{Program: "echo", Version: "v3.0.0", Endpoints: eps, Mode: runnerstate.RestartNow})
	var se *runnerstate.StartError
	require.ErrorAs(t, <-started, &se)
	assert.Equal(t, 4, se.ExitCode, "superseded: %v", se)
	newest.Expect("ready")
	r, err := runnerstate.Status(dir)
	require.NoError(t, err)
	assert.Zero(t, r.StartFailures, "no failure counted")
}
