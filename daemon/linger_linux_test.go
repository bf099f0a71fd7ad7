package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
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
// "ready".
const envHoldReady = "RS_DAEMON_HOLD_READY"

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
	var opts Options
	if err := json.Unmarshal([]byte(os.Getenv(envServerOptions)), &opts); err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
	srv, err := Listen(ctx, dir, opts)
	cancel()
	if err != nil {
		testharness.Say("error %v", err)
		return 3
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
	<-srv.Idle()
	testharness.Say("idle")
	srv.Close()
	testharness.Say("closed")
	return 0
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
	a := startLinger(t, dir, lingerOpts("v1.0.0", time.Minute))
	a.Expect("listening")
	a.Expect("ready inherited=0")
	st := openStream(t, path)
	pid, err := st.tick()
	require.NoError(t, err)
	require.Equal(t, a.PID(), pid)

	b := startLinger(t, dir, lingerOpts("v1.1.0", time.Minute))
	b.Expect("listening")
	b.Expect("ready inherited=1")
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
	_, ok, err := runnerstate.ReadLingering(dir)
	require.NoError(t, err)
	assert.False(t, ok, "Close removed the lingering record")
}

// Point 5: at the deadline the library closes what the lingering server
// still holds, so Idle closes and the server exits.
func TestLingerDeadlineClosesWhatIsLeft(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := startLinger(t, dir, lingerOpts("v1.0.0", 300*time.Millisecond))
	a.Expect("listening")
	a.Expect("ready inherited=0")
	st := openStream(t, path)
	_, err := st.tick()
	require.NoError(t, err)
	b := startLinger(t, dir, lingerOpts("v1.1.0", time.Minute))
	b.Expect("listening")
	b.Expect("ready inherited=1")
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
	a := startLinger(t, dir, lingerOpts("v1.0.0", time.Minute))
	a.Expect("listening")
	a.Expect("ready inherited=0")
	st := openStream(t, path)
	_, err := st.tick()
	require.NoError(t, err)
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
	a := startLinger(t, dir, lingerOpts("v1.0.0", time.Minute))
	a.Expect("listening")
	a.Expect("ready inherited=0")
	st := openStream(t, path)
	_, err := st.tick()
	require.NoError(t, err)
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
	_, ok, err := runnerstate.ReadLingering(dir)
	require.NoError(t, err)
	assert.False(t, ok, "no server lingers")
	pid, err := st.tick()
	require.NoError(t, err)
	assert.Equal(t, a.PID(), pid)

	// It is an ordinary holder again: the next upgrade goes through.
	c := startLinger(t, dir, lingerOpts("v1.2.0", time.Minute))
	c.Expect("listening")
	c.Expect("ready inherited=1")
	a.Expect("handed")
	a.Expect("leaving drain")
	assert.Equal(t, c.PID(), pingPID(t, path))
}

// Point 4: a successor whose Listen fails after its admission (a bind
// refused) gives the directory back too.
func TestASuccessorWhoseListenFailsGivesTheSocketsBack(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := startLinger(t, dir, lingerOpts("v1.0.0", time.Minute))
	a.Expect("listening")
	a.Expect("ready inherited=0")
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
			a := startLinger(t, dir, lingerOpts("v1.0.0", time.Minute))
			a.Expect("listening")
			a.Expect("ready inherited=0")
			require.NoError(t, runnerstate.RequestRestart(dir, mode))
			a.Expect("leaving " + mode)
			a.Expect("idle")
			a.Expect("closed")
			_, ok, err := runnerstate.ReadLingering(dir)
			require.NoError(t, err)
			assert.False(t, ok)
		})
	}
}

// Point 5: at most one lingering server: one that would linger while an
// older one lingers asks it to end now, and it does; then it lingers
// itself.
func TestAnOlderLingeringServerEndsWhenANewerOneLingers(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "d.sock")
	a := startLinger(t, dir, lingerOpts("v1.0.0", time.Minute))
	a.Expect("listening")
	a.Expect("ready inherited=0")
	sa := openStream(t, path)
	_, err := sa.tick()
	require.NoError(t, err)
	b := startLinger(t, dir, lingerOpts("v1.1.0", time.Minute))
	b.Expect("listening")
	b.Expect("ready inherited=1")
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
