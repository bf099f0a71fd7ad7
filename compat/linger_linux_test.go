package compat

import (
	"bufio"
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

// The lingering cells (v0.5): a server of package daemon, built from each
// tree that has the package, beside a build of the other side. A v0.4
// successor's gate entry does not say it can take a lingering predecessor,
// so a current server with Options.Linger drains for it as v0.4 did; a
// current successor takes a v0.4 server's place as a v0.4 successor does.

// daemonProgram is a server of package daemon: -dir, -version, -mode
// (drain or now) and, in a current build, -linger. It writes one line per
// event on stdout, "<unix nanoseconds> <pid> <event>": "admitted" (Listen
// returned), "ready", "accept", "handed" (current builds: Handed closed),
// "leaving <reason>", "closed", "error <err>". A connection's line "ping"
// is answered "pong <pid> <version>"; "stream" starts "tick <pid> <n>"
// lines every 20 ms until the client goes. On Leaving it answers what it
// accepted (cutting streams for now), then Closes.
const daemonProgram = `package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/daemon"
)

var out sync.Mutex

func say(format string, args ...any) {
	out.Lock()
	defer out.Unlock()
	fmt.Printf("%d %d "+format+"\n", append([]any{time.Now().UnixNano(), os.Getpid()}, args...)...)
}

func main() {
	dir := flag.String("dir", "", "the server's directory")
	version := flag.String("version", "v1.0.0", "its version")
	mode := flag.String("mode", "drain", "asked of the server there")
	linger := flag.Duration("linger", 0, "Options.Linger (current builds)")
	flag.Parse()
	opts := daemon.Options{Program: "compat-daemon", Version: *version, Mode: *mode,
		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "d.sock"}}}
	LINGER
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	srv, err := daemon.Listen(ctx, *dir, opts)
	cancel()
	if err != nil {
		say("error %v", err)
		os.Exit(3)
	}
	say("admitted")
	HANDED
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	var served sync.WaitGroup
	served.Add(1)
	go func() {
		defer served.Done()
		for {
			c, err := srv.Listeners()[0].Accept()
			if err != nil {
				return
			}
			say("accept")
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			served.Add(1)
			go func() {
				defer served.Done()
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					c.Close()
				}()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					switch sc.Text() {
					case "ping":
						fmt.Fprintf(c, "pong %d %s\n", os.Getpid(), *version)
					case "stream":
						for n := 0; ; n++ {
							if _, err := fmt.Fprintf(c, "tick %d %d\n", os.Getpid(), n); err != nil {
								return
							}
							time.Sleep(20 * time.Millisecond)
						}
					}
				}
			}()
		}
	}()
	if err := srv.Ready(nil); err != nil {
		say("error %v", err)
		os.Exit(1)
	}
	say("ready")
	<-srv.Leaving()
	say("leaving %s", srv.Reason())
	if why := srv.Reason(); why == runnerstate.RestartNow || why == runnerstate.RestartLost {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}
	served.Wait()
	srv.Close()
	say("closed")
}
`

// buildDaemon builds daemonProgram against the module at src (current:
// with Options.Linger and Handed) into a binary, and returns its path.
func buildDaemon(t *testing.T, src string, current bool) string {
	program := daemonProgram
	if current {
		program = strings.Replace(program, "LINGER", "opts.Linger = *linger", 1)
		program = strings.Replace(program, "HANDED", `go func() { <-srv.Handed(); say("handed") }()`, 1)
	} else {
		program = strings.Replace(program, "LINGER", "_ = linger // no Options.Linger in this build", 1)
		program = strings.Replace(program, "HANDED", "", 1)
	}
	bin, out, err := testharness.BuildOverlaid(t, src, "internal/compatdaemon", program)
	if err != nil {
		t.Fatalf("compat: build the daemon server in %s: %s%v", src, out, err)
	}
	return bin
}

// daemonEvent is the time of p's first event line that starts with what
// (its pid's), and whether there is one.
func daemonEvent(p *proc, what string) (time.Time, bool) {
	for line := range strings.Lines(p.output()) {
		f := strings.SplitN(strings.TrimSpace(line), " ", 3)
		if len(f) == 3 && f[1] == strconv.Itoa(p.pid()) && strings.HasPrefix(f[2], what) {
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err == nil {
				return time.Unix(0, ns), true
			}
		}
	}
	return time.Time{}, false
}

// awaitEvent waits for p's event what and returns its time.
func awaitEvent(t *testing.T, p *proc, what string) time.Time {
	t.Helper()
	var at time.Time
	waitFor(t, fmt.Sprintf("%s to say %q", p.name, what), testharness.Wait, func() bool {
		var ok bool
		at, ok = daemonEvent(p, what)
		if !ok && p.exited() {
			t.Fatalf("%s exited %d before it said %q; its output:\n%s", p.name, p.code, what, p.output())
		}
		return ok
	})
	return at
}

// daemonDir is a directory whose socket path fits sun_path.
func daemonDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "rsc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// tickFrom reads the stream's next tick and returns the pid that sent it.
func tickFrom(t *testing.T, rd *bufio.Reader) int {
	t.Helper()
	line, err := rd.ReadString('\n')
	require.NoError(t, err, "the stream is not cut")
	f := strings.Fields(line)
	require.Len(t, f, 3, line)
	pid, err := strconv.Atoi(f[1])
	require.NoError(t, err)
	return pid
}

// drainBeside: a server of old with a stream open, then a successor of
// succ asking it to drain (succ with -linger 5s when it is current). old
// drains as v0.4 did: no lingering record, its stream served to its end;
// a client that connects meanwhile is never refused, and is answered by
// the successor, which is admitted only once old has closed.
func drainBeside(t *testing.T, old, succ build) {
	dir := daemonDir(t)
	oldArgs := []string{"-dir", dir, "-version", "v1.0.0"}
	if old.name == "current" {
		oldArgs = append(oldArgs, "-linger", "5s")
	}
	a := startProc(t, old.name+" daemon", old.daemon, oldArgs...)
	awaitEvent(t, a, "ready")
	path := filepath.Join(dir, "d.sock")
	st, err := net.Dial("unix", path)
	require.NoError(t, err)
	defer st.Close()
	st.SetDeadline(time.Now().Add(testharness.Wait))
	_, err = fmt.Fprintln(st, "stream")
	require.NoError(t, err)
	rd := bufio.NewReader(st)
	require.Equal(t, a.pid(), tickFrom(t, rd))

	succArgs := []string{"-dir", dir, "-version", "v1.1.0", "-mode", "drain"}
	if succ.name == "current" {
		succArgs = append(succArgs, "-linger", "5s")
	}
	b := startProc(t, succ.name+" daemon", succ.daemon, succArgs...)
	awaitEvent(t, a, "leaving drain")
	// A client that comes during the drain waits in the backlog.
	c, err := net.Dial("unix", path)
	require.NoError(t, err, "a connect during the drain is never refused")
	defer c.Close()
	c.SetDeadline(time.Now().Add(testharness.Wait))
	_, err = fmt.Fprintln(c, "ping")
	require.NoError(t, err)
	answered := make(chan string, 1)
	go func() { line, _ := bufio.NewReader(c).ReadString('\n'); answered <- line }()
	for range 5 {
		require.Equal(t, a.pid(), tickFrom(t, rd), "the drain serves the stream")
	}
	_, lingering, err := runnerstate.ReadLingering(dir)
	require.NoError(t, err)
	assert.False(t, lingering, "nobody lingers: %s drains", a.name)
	if handedAt, handed := daemonEvent(a, "handed"); handed {
		leftAt, _ := daemonEvent(a, "leaving")
		assert.False(t, handedAt.Before(leftAt), "%s's Handed closed before Leaving, as a lingering server's does", a.name)
	}
	_, admitted := daemonEvent(b, "admitted")
	assert.False(t, admitted, "%s admitted while %s drains", b.name, a.name)
	rec, held, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.True(t, held && rec.PID == a.pid(), "%s holds the directory while it drains: %+v", a.name, rec)

	st.Close() // the stream ends: the drain is over
	closed := awaitEvent(t, a, "closed")
	assert.Equal(t, 0, a.exit(t, testharness.Wait), "%s exits 0; its output:\n%s", a.name, a.output())
	at := awaitEvent(t, b, "admitted")
	assert.False(t, at.Before(closed), "%s admitted at %v, before %s closed at %v", b.name, at, a.name, closed)
	awaitEvent(t, b, "ready")
	select {
	case line := <-answered:
		assert.Equal(t, fmt.Sprintf("pong %d v1.1.0\n", b.pid()), line, "the client of the drain is answered by the successor")
	case <-time.After(testharness.Wait):
		t.Fatalf("the client that came during the drain was not answered; %s's output:\n%s", b.name, b.output())
	}
	_, lingering, err = runnerstate.ReadLingering(dir)
	require.NoError(t, err)
	assert.False(t, lingering)
	require.NoError(t, runnerstate.RequestRestart(dir, runnerstate.RestartNow))
	assert.Equal(t, 0, b.exit(t, testharness.Wait), "%s asked to stop", b.name)
}
