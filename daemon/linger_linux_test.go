package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envHoldReady makes the linger role publish Ready only on the command
// "ready"; envJob makes it start a job that holds its tree (Inherit) once
// ready, killed when it leaves.
const (
	envHoldReady = "RS_DAEMON_HOLD_READY"
	envJob       = "RS_DAEMON_JOB"
	envNoClose   = "RS_DAEMON_NO_CLOSE" // "1": never Close after Idle
	envSlowRV    = "RS_DAEMON_SLOW_RV"  // "1": its rendezvous keeps what it receives 300 ms late
)

func init() {
	roles["linger"] = roleLinger
}

// linger: a raw-protocol server. Listen with the options in its
// environment, say "listening", publish Ready (at once, or on the command
// "ready" with envHoldReady) and say "ready". Each connection's lines:
// "ping" is answered "pong <pid>"; "stream" starts "tick <pid> <n>" lines
// every 20 ms until the connection ends. It says "handed" when Handed
// closes before Leaving, then "leaving <reason>" when Leaving closes,
// "idle" when Idle closes, Closes, says "closed" and exits 0. The command
// "open" says "open <n>" (Server.Open); "close" Closes at once.
func roleLinger(dir string) int {
	if os.Getenv(envSlowRV) == "1" {
		slow := func() { time.Sleep(300 * time.Millisecond) } // the fault: a receiver slow to keep the sockets
		testHookReceived.Store(&slow)
	}
	srv, code := listenFromEnv(dir)
	if srv == nil {
		return code
	}
	testharness.Say("listening")
	for _, ln := range srv.Listeners() {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go lingerAnswer(c)
			}
		}()
	}
	ready := make(chan struct{})
	closed := make(chan struct{})
	go func() {
		hold := os.Getenv(envHoldReady) == "1"
		if !hold {
			close(ready)
		}
		for cmd := range testharness.Commands() {
			switch cmd {
			case "ready":
				if hold {
					hold = false
					close(ready)
				}
			case "open":
				testharness.Say("open %d", srv.Open())
			case "close":
				srv.Close()
				close(closed)
				return
			}
		}
	}()
	select {
	case <-ready:
	case <-closed:
		testharness.Say("closed")
		return 0
	}
	if err := srv.Ready(nil); err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	var job *exec.Cmd
	if os.Getenv(envJob) == "1" {
		job = exec.Command("sleep", "600")
		if err := runnerstate.Inherit(dir, job); err != nil {
			testharness.Say("error %v", err)
			return 1
		}
		if err := job.Start(); err != nil {
			testharness.Say("error %v", err)
			return 1
		}
		defer job.Wait()
		defer job.Process.Kill()
	}
	testharness.Say("ready inherited=%d", srv.inherited)
	select {
	case <-srv.Handed():
		testharness.Say("handed")
		<-srv.Leaving()
	case <-srv.Leaving():
	case <-closed:
		testharness.Say("closed")
		return 0
	}
	testharness.Say("leaving %s", srv.Reason())
	if job != nil {
		job.Process.Kill()
	}
	<-srv.Idle()
	testharness.Say("idle")
	if os.Getenv(envNoClose) == "1" {
		select {} // a program that never closes: its successor kills it after kill_at
	}
	srv.Close()
	testharness.Say("closed handed=%v", isClosed(srv.Handed()))
	return 0
}

// listenFromEnv is a role's Listen on dir with the options in its
// environment; nil, having said "error <err>", and the role's exit code
// when it fails.
func listenFromEnv(dir string) (*Server, int) {
	var opts Options
	if err := json.Unmarshal([]byte(os.Getenv(envServerOptions)), &opts); err != nil {
		testharness.Say("error %v", err)
		return nil, 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
	defer cancel()
	srv, err := Listen(ctx, dir, opts)
	if err != nil {
		testharness.Say("error %v", err)
		return nil, 3
	}
	return srv, 0
}

// lingerAnswer answers c's lines for the linger role.
func lingerAnswer(c net.Conn) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		switch sc.Text() {
		case "ping":
			fmt.Fprintf(c, "pong %d\n", os.Getpid())
		case "stream":
			for n := 0; ; n++ {
				if _, err := fmt.Fprintf(c, "tick %d %d\n", os.Getpid(), n); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond) // the stream's pace, not a synchronisation
			}
		}
	}
}

// startLinger starts the linger role on dir with opts (and more
// environment), killed and reaped when the test ends.
func startLinger(t *testing.T, dir string, opts Options, env ...string) *testharness.Child {
	t.Helper()
	data, _ := json.Marshal(opts)
	cmd := testharness.Command(dir)
	cmd.Env = append(append(os.Environ(), envServerOptions+"="+string(data)), env...)
	return testharness.StartCmd(t, cmd, "linger")
}

// stream is a client's streaming connection.
type stream struct {
	c  net.Conn
	rd *bufio.Reader
}

// openStream connects to path and starts a stream.
func openStream(t *testing.T, path string) *stream {
	t.Helper()
	c, err := net.Dial("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(testharness.Wait))
	_, err = fmt.Fprintln(c, "stream")
	require.NoError(t, err)
	return &stream{c: c, rd: bufio.NewReader(c)}
}

// tick reads the stream's next tick and returns the pid that sent it.
func (s *stream) tick() (int, error) {
	line, err := s.rd.ReadString('\n')
	if err != nil {
		return 0, err
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "tick" {
		return 0, fmt.Errorf("not a tick: %q", line)
	}
	return strconv.Atoi(f[1])
}

// pingPID connects to path, pings, and returns the pid that answered.
func pingPID(t *testing.T, path string) int {
	t.Helper()
	c, err := net.Dial("unix", path)
	require.NoError(t, err, "connect: never refused")
	defer c.Close()
	line, err := ping(c, "ping")
	require.NoError(t, err)
	f := strings.Fields(line)
	require.Len(t, f, 2, line)
	pid, err := strconv.Atoi(f[1])
	require.NoError(t, err)
	return pid
}

func lingerOpts(version string, linger time.Duration) Options {
	return Options{Program: "echo", Version: version, Endpoints: unixEndpoint("d.sock"), Linger: linger}
}

// Points 2 and 3: a drain toward a starter of this package lets the server
// step down at once and go on serving its stream beside the successor,
// which accepts the new connections; Handed closes before Leaving, and the
// lingering record says so until Close.
func TestLingeringServerKeepsItsStreamWhileTheSuccessorAccepts(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute))
	st := openStream(t, path)
	pid, err := st.tick()
	require.NoError(t, err)
	require.Equal(t, a.PID(), pid)

	b := readyLinger(t, dir, 1, lingerOpts("v1.1.0", time.Minute))
	a.Expect("handed")
	a.Expect("leaving drain")
	assert.Equal(t, b.PID(), pingPID(t, path), "the successor accepts new connections")

	rep, err := runnerstate.Status(dir)
	require.NoError(t, err)
	require.NotNil(t, rep.Lingering, "the lingering server is reported")
	assert.Equal(t, a.PID(), rep.Lingering.Holder.PID)
	assert.Equal(t, 1, rep.Lingering.Open)
	assert.Equal(t, b.PID(), rep.Holder.PID, "the successor holds the directory")

	for range 5 { // the stream goes on, from the lingering server
		pid, err := st.tick()
		require.NoError(t, err, "the stream is not cut before the deadline")
		require.Equal(t, a.PID(), pid)
	}
	st.c.Close()
	a.Expect("idle")
	a.Expect("closed")
	require.NoError(t, a.Wait())
	assertNoLingering(t, dir, "Close removed the lingering record")
}

// Point 5: at the deadline the library closes what the lingering server
// still holds, so Idle closes and the server exits.
func TestLingerDeadlineClosesWhatIsLeft(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", 300*time.Millisecond))
	st := streamOn(t, path)
	readyLinger(t, dir, 1, lingerOpts("v1.1.0", time.Minute))
	a.Expect("handed")
	a.Expect("leaving drain")
	a.Expect("idle")
	a.Expect("closed")
	for {
		if _, err := st.tick(); err != nil {
			break // cut at the deadline
		}
	}
	require.NoError(t, a.Wait())
}

// Point 3: while the lingering server holds its copies, the successor
// accepts nothing before it is ready, and the lingering server accepts
// nothing after it stepped down: a client that connects meanwhile waits in
// the backlog and is answered by the successor once it is ready.
func TestNobodyAcceptsBetweenStepDownAndReady(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute))
	streamOn(t, path)
	b := startLinger(t, dir, lingerOpts("v1.1.0", time.Minute), envHoldReady+"=1")
	b.Expect("listening")

	c, err := net.Dial("unix", path)
	require.NoError(t, err, "never refused")
	defer c.Close()
	_, err = fmt.Fprintln(c, "ping")
	require.NoError(t, err)
	b.Send("ready")
	b.Expect("ready inherited=1")
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("pong %d\n", b.PID()), line, "answered by the successor, once ready")
	a.Expect("handed")
}

// Point 4: a successor killed before it is ready gives the sockets back:
// the lingering server takes the directory back and accepts again, its
// Leaving and Handed still open.
func TestASuccessorKilledBeforeReadyGivesTheSocketsBack(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute))
	st := streamOn(t, path)
	b := startLinger(t, dir, lingerOpts("v1.1.0", time.Minute), envHoldReady+"=1")
	b.Expect("listening")
	b.Kill()
	b.Wait()

	assert.Equal(t, a.PID(), pingPID(t, path), "the old server accepts again")
	rec, held, err := runnerstate.Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.Equal(t, a.PID(), rec.PID)
	assert.True(t, rec.Usable(), "published ready again, the leaving mark taken back")
	assertNoLingering(t, dir, "no server lingers")
	pid, err := st.tick()
	require.NoError(t, err)
	assert.Equal(t, a.PID(), pid)

	// It is an ordinary holder again: the next upgrade goes through.
	c := readyLinger(t, dir, 1, lingerOpts("v1.2.0", time.Minute))
	a.Expect("handed")
	a.Expect("leaving drain")
	assert.Equal(t, c.PID(), pingPID(t, path))
}

// Point 4: a successor whose Listen fails after its admission (a bind
// refused) gives the directory back too.
func TestASuccessorWhoseListenFailsGivesTheSocketsBack(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	opts := lingerOpts("v1.1.0", time.Minute)
	opts.Endpoints = append(opts.Endpoints, runnerstate.Endpoint{Network: "tcp", Address: taken.Addr().String()})
	b := startLinger(t, dir, opts)
	out := b.Expect("error")
	assert.Contains(t, out, "address already in use")
	assert.Equal(t, a.PID(), pingPID(t, path), "the old server accepts again")
	rec, held, err := runnerstate.Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.Equal(t, a.PID(), rec.PID)
}

// Point 2: a server lingers only on a drain that a starter of this
// package asked for: an operator's drain, and RestartNow, leave as with
// Linger 0.
func TestLingerOnlyForAStartersDrain(t *testing.T) {
	for _, mode := range []string{runnerstate.RestartDrain, runnerstate.RestartNow} {
		t.Run(mode, func(t *testing.T) {
			dir := shortDir(t)
			a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute))
			require.NoError(t, runnerstate.RequestRestart(dir, mode))
			a.Expect("leaving " + mode)
			a.Expect("idle")
			a.Expect("closed")
			assertNoLingering(t, dir)
		})
	}
}

// Point 5: at most one lingering server: one that would linger while an
// older one lingers asks it to end now, and it does; then it lingers
// itself.
func TestAnOlderLingeringServerEndsWhenANewerOneLingers(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute))
	streamOn(t, path)
	b := readyLinger(t, dir, 1, lingerOpts("v1.1.0", time.Minute))
	a.Expect("handed")
	a.Expect("leaving drain")
	sb := openStream(t, path)
	pid, err := sb.tick()
	require.NoError(t, err)
	require.Equal(t, b.PID(), pid)

	c := startLinger(t, dir, lingerOpts("v1.2.0", time.Minute))
	a.Expect("idle") // told to end now: its stream is cut
	a.Expect("closed")
	require.NoError(t, a.Wait())
	c.Expect("listening")
	c.Expect("ready inherited=1")
	b.Expect("handed")
	b.Expect("leaving drain")
	l, ok, err := runnerstate.ReadLingering(dir)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, b.PID(), l.Holder.PID, "the newer server lingers now")
	for range 3 {
		pid, err := sb.tick()
		require.NoError(t, err)
		require.Equal(t, b.PID(), pid)
	}
}

// Point 2: a server whose job holds its tree does not linger (its
// successor would take the job for an orphan): it drains as with Linger 0.
func TestARunnerWithJobsDoesNotLinger(t *testing.T) {
	dir := shortDir(t)
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute), envJob+"=1")
	b := startLinger(t, dir, lingerOpts("v1.1.0", time.Minute))
	a.Expect("leaving drain") // not "handed" first: it did not linger
	a.Expect("idle")
	a.Expect("closed handed=true")
	b.Expect("listening")
	b.Expect("ready inherited=1")
	assertNoLingering(t, dir)
}

// Point 6: every server counts its open connections; Idle waits for them
// after Leaving. Handed closes, for a server that does not linger, once a
// successor had its sockets, at the latest when Close returns.
func TestOpenAndIdleCountTheConnections(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", 0))
	st := streamOn(t, path)
	a.Send("open")
	a.Expect("open 1")
	b := startLinger(t, dir, lingerOpts("v1.1.0", 0))
	a.Expect("leaving drain")
	a.Send("open")
	a.Expect("open 1") // Idle waits for it
	st.c.Close()
	a.Expect("idle")
	a.Expect("closed handed=true")
	b.Expect("listening")
	b.Expect("ready inherited=1")
}

// Point 2: Close during a hand-over finishes it (the successor gets ready
// with the sockets), then leaves as with Linger 0.
func TestCloseDuringAHandOverFinishesIt(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute))
	b := startLinger(t, dir, lingerOpts("v1.1.0", time.Minute), envHoldReady+"=1")
	b.Expect("listening")
	a.Send("close")
	b.Send("ready")
	b.Expect("ready inherited=1")
	a.Expect("handed")
	a.Expect("leaving drain")
	a.Expect("idle")
	a.Expect("closed handed=true")
	assert.Equal(t, b.PID(), pingPID(t, path))
	assertNoLingering(t, dir, "Close removed the lingering record")
}

func init() {
	roles["http-linger"] = roleHTTPLinger
}

// http-linger: ServeHTTP on Listen with the options in its environment:
// "/" answers its pid; "/stream" writes "tick <pid>" lines every 20 ms
// until the client goes. It says "ready", "leaving <reason>", "closed".
func roleHTTPLinger(dir string) int {
	srv, code := listenFromEnv(dir)
	if srv == nil {
		return code
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%d", os.Getpid()) })
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		for {
			if _, err := fmt.Fprintf(w, "tick %d\n", os.Getpid()); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond): // the stream's pace
			}
		}
	})
	if err := srv.Ready(nil); err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	testharness.Say("ready")
	go func() {
		<-srv.Leaving()
		testharness.Say("leaving %s", srv.Reason())
	}()
	if err := ServeHTTP(context.Background(), srv, &http.Server{Handler: mux}); err != nil {
		testharness.Say("error %v", err)
	}
	srv.Close()
	testharness.Say("closed")
	return 0
}

// ServeHTTP lingers: an HTTP stream on the old server runs on while the
// successor answers new requests; the old server's ServeHTTP returns once
// the stream ends.
func TestServeHTTPLingersOnAStream(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	start := func(version string) *testharness.Child {
		data, _ := json.Marshal(lingerOpts(version, time.Minute))
		cmd := testharness.Command(dir)
		cmd.Env = append(os.Environ(), envServerOptions+"="+string(data))
		return testharness.StartCmd(t, cmd, "http-linger")
	}
	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}, Timeout: testharness.Wait}
	get := func() string {
		resp, err := client.Get("http://d/")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}
	a := start("v1.0.0")
	a.Expect("ready")
	resp, err := client.Get("http://d/stream")
	require.NoError(t, err)
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("tick %d\n", a.PID()), line)

	b := start("v1.1.0")
	b.Expect("ready")
	a.Expect("leaving drain")
	assert.Equal(t, strconv.Itoa(b.PID()), get())
	for range 5 {
		line, err := rd.ReadString('\n')
		require.NoError(t, err, "the stream runs on")
		require.Equal(t, fmt.Sprintf("tick %d\n", a.PID()), line)
	}
	resp.Body.Close()
	a.Expect("closed")
	require.NoError(t, a.Wait())
}

// Point 5: a lingering server that does not exit by its kill_at (its
// program never calls Close) is killed by the holder, verified, and its
// record removed.
func TestALingeringServerPastKillAtIsKilled(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	opts := lingerOpts("v1.0.0", 200*time.Millisecond)
	opts.LingerGrace = 200 * time.Millisecond
	a := readyLinger(t, dir, 0, opts, envNoClose+"=1")
	streamOn(t, path)
	b := readyLinger(t, dir, 1, lingerOpts("v1.1.0", time.Minute))
	a.Expect("handed")
	a.Expect("leaving drain")
	a.Expect("idle") // the deadline closed its stream; it does not Close
	err := a.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "signal: killed", ee.Error(), "killed after kill_at")
	for deadline := time.Now().Add(testharness.Wait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, ok, _ := runnerstate.ReadLingering(dir); !ok {
			break
		}
	}
	assertNoLingering(t, dir, "the record of the killed server is removed")
	assert.Equal(t, b.PID(), pingPID(t, path))
}

// Point 3: the lingering server lets the directory go only once its
// successor says it keeps the sockets: a successor slow to read them still
// takes them, and keeps a TCP port picked by port 0 (which a successor
// that bound anew would change).
func TestStepDownWaitsUntilTheSuccessorKeepsTheSockets(t *testing.T) {
	dir := shortDir(t)
	tcp := func(version string) Options {
		return Options{Program: "echo", Version: version, Linger: time.Minute,
			Endpoints: []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:0"}}}
	}
	a := readyLinger(t, dir, 0, tcp("v1.0.0"))
	rec, _, err := runnerstate.Running(dir)
	require.NoError(t, err)
	readyLinger(t, dir, 1, tcp("v1.1.0"), envSlowRV+"=1")
	a.Expect("handed")
	now, _, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.Equal(t, rec.Endpoints[0].Address, now.Endpoints[0].Address, "the port is kept")
}

// Points 4 and 5: a deadline that passes before the successor is ready
// closes what the server holds, but it keeps its copies of the sockets: a
// successor that then dies before it is ready still gives them back.
func TestADeadlineBeforeReadyKeepsTheSocketsToGiveBack(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", 200*time.Millisecond))
	st := streamOn(t, path)
	b := startLinger(t, dir, lingerOpts("v1.1.0", time.Minute), envHoldReady+"=1")
	b.Expect("listening")
	for {
		if _, err := st.tick(); err != nil {
			break // cut at the deadline
		}
	}
	b.Kill()
	b.Wait()
	assert.Equal(t, a.PID(), pingPID(t, path), "the old server accepts again")
	rec, held, err := runnerstate.Running(dir)
	require.NoError(t, err)
	require.True(t, held)
	assert.Equal(t, a.PID(), rec.PID)
}

// Point 5: a server that waits for an older lingering server to end
// before it lingers itself hands over to the newest starter when it steps
// down: the starter that asked may have been superseded meanwhile, and be
// gone.
func TestASupersededStarterDoesNotStopTheLinger(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute), envNoClose+"=1")
	optsB := lingerOpts("v1.1.0", time.Minute)
	optsB.LingerGrace = 2 * time.Second // how long it waits for a, which never exits by itself
	b := readyLinger(t, dir, 1, optsB)
	a.Expect("handed")
	a.Expect("leaving drain")
	a.Expect("idle")
	st := openStream(t, path)
	pid, err := st.tick()
	require.NoError(t, err)
	require.Equal(t, b.PID(), pid)

	c := startLinger(t, dir, lingerOpts("v1.2.0", time.Minute))
	for deadline := time.Now().Add(testharness.Wait); ; time.Sleep(5 * time.Millisecond) {
		l, ok, _ := runnerstate.ReadLingering(dir)
		if ok && l.End == runnerstate.LingerEndNow {
			break // b prepares to linger: it waits for a to end
		}
		require.True(t, time.Now().Before(deadline), "b never asked a to end")
	}
	d := startLinger(t, dir, lingerOpts("v1.2.1", time.Minute))
	c.Expect("error") // superseded by d
	c.Wait()
	d.Expect("listening")
	d.Expect("ready inherited=1")
	b.Expect("handed")
	b.Expect("leaving drain")
	assert.Equal(t, d.PID(), pingPID(t, path))
	for range 3 {
		pid, err := st.tick()
		require.NoError(t, err, "b's stream runs on: it lingers")
		require.Equal(t, b.PID(), pid)
	}
}

// Point 4: a starter that asked for the drain and died before the server
// stepped down (here while the server waits for an older lingering server
// to end) leaves a void request: the server keeps the directory, ready,
// rather than drain for nobody and leave nothing serving.
func TestAStarterGoneBeforeTheStepDownLeavesTheServerServing(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", time.Minute), envNoClose+"=1")
	optsB := lingerOpts("v1.1.0", time.Minute)
	optsB.LingerGrace = time.Second // how long it waits for a, which never exits by itself
	b := readyLinger(t, dir, 1, optsB)
	a.Expect("handed")
	a.Expect("leaving drain")
	a.Expect("idle")

	c := startLinger(t, dir, lingerOpts("v1.2.0", time.Minute))
	for deadline := time.Now().Add(testharness.Wait); ; time.Sleep(5 * time.Millisecond) {
		l, ok, _ := runnerstate.ReadLingering(dir)
		if ok && l.End == runnerstate.LingerEndNow {
			break // b got c's drain, and waits for a to end
		}
		require.True(t, time.Now().Before(deadline), "b never asked a to end")
	}
	c.Kill()
	c.Wait()
	require.Error(t, a.Wait(), "a is killed after b's LingerGrace")
	for deadline := time.Now().Add(testharness.Wait); ; time.Sleep(5 * time.Millisecond) {
		rec, held, _ := runnerstate.Running(dir)
		if held && rec.PID == b.PID() && rec.Usable() {
			break // b took the directory back, ready
		}
		require.True(t, time.Now().Before(deadline), "b never took the directory back")
	}
	assert.Equal(t, b.PID(), pingPID(t, path), "b accepts")
	b.Send("open")
	b.Expect("open") // not "leaving": Leaving never closed
}

// readyLinger starts the linger role on dir with opts (and more
// environment) and waits until it is ready, having been handed inherited
// sockets.
func readyLinger(t *testing.T, dir string, inherited int, opts Options, env ...string) *testharness.Child {
	t.Helper()
	c := startLinger(t, dir, opts, env...)
	c.Expect("listening")
	c.Expect(fmt.Sprintf("ready inherited=%d", inherited))
	return c
}

// assertNoLingering checks that dir has no linger.json (msg: assert's).
func assertNoLingering(t *testing.T, dir string, msg ...any) {
	t.Helper()
	_, ok, err := runnerstate.ReadLingering(dir)
	require.NoError(t, err)
	assert.False(t, ok, msg...)
}

// streamOn opens a stream on path and reads its first tick.
func streamOn(t *testing.T, path string) *stream {
	t.Helper()
	st := openStream(t, path)
	_, err := st.tick()
	require.NoError(t, err)
	return st
}

// Close during a hand-over waits at most Linger for the successor: one
// that is not ready by then keeps the sockets it was handed, and is ready
// with them later.
func TestCloseDuringAHandOverWaitsAtMostLinger(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := readyLinger(t, dir, 0, lingerOpts("v1.0.0", 300*time.Millisecond))
	b := startLinger(t, dir, lingerOpts("v1.1.0", time.Minute), envHoldReady+"=1")
	b.Expect("listening")
	a.Send("close")
	exited := make(chan error, 1)
	go func() { exited <- a.Wait() }()
	select {
	case err := <-exited:
		require.NoError(t, err, "Close returned, the successor still not ready")
	case <-time.After(testharness.Wait):
		t.Fatalf("Close waited past Linger for a successor that is not ready")
	}
	assertNoLingering(t, dir, "Close removed the lingering record")
	b.Send("ready")
	b.Expect("ready inherited=1")
	assert.Equal(t, b.PID(), pingPID(t, path))
}
