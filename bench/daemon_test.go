//go:build linux

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/daemon"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"golang.org/x/sys/unix"
)

// Package daemon's benchmarks. Every server here is a small echo server in
// a process of its own (this test binary playing a role): it answers each
// connection's one line "ping" with "pong" and closes it. Its directory is
// <base>/d, its socket <base>/d/echo.sock; it writes what the benchmark
// reads into <base>/logs: "<pid>.ready" once it serves, and at its exit
// "<pid>.events", with the CLOCK_MONOTONIC times of its restart request, of
// the start and end of its accept loop, of its Close (a daemon server's),
// and of every connection it accepted. CLOCK_MONOTONIC is one clock for
// every process of the machine.

func init() {
	roles["upgrade-client"] = upgradeClient
	roles["echo-daemon"] = echoDaemon
	roles["echo-daemon-tcp"] = echoDaemonTCP
	roles["echo-bind-anew"] = echoBindAnew
	roles["echo-tableflip"] = echoTableflip
}

const (
	echoProgram = "echo"
	echoSocket  = "echo.sock"
	// clientPause is what a client waits after each request: eight
	// clients then send up to 8,000 requests a second, and leave the two
	// cores room for the servers' own start.
	clientPause = time.Millisecond
	// upgradeCount is the fixed count of upgrades of one scenario.
	upgradeCount = 20
	// upgradeClients is the count of client processes.
	upgradeClients = 8
	// steadyGap is how long the clients run between two upgrades.
	steadyGap = 100 * time.Millisecond
	// settle is how long after an upgrade (the old server reaped) latency is
	// not counted as steady state either.
	settle = 10 * time.Millisecond
	// upgradeWait bounds each step of an upgrade, and the old server's Grace:
	// generous, because an upgrade was seen to take 19 s beside two CPU hogs
	// (binding anew, while the refused clients kept the cores busy).
	upgradeWait = time.Minute
)

// echoDirs are a scenario's directories under base.
func echoDirs(base string) (dir, sock, logs string) {
	dir = filepath.Join(base, "d")
	return dir, filepath.Join(dir, echoSocket), filepath.Join(base, "logs")
}

// ---------------------------------------------------------------------------
// The servers.

// echoServer serves echo connections and keeps the times of its accepts.
type echoServer struct {
	mu       sync.Mutex
	accepts  []int64
	streams  []int64 // when each stream it served to its end ended
	request  int64   // when the restart (upgrade) request arrived
	started  int64   // when its accept loop began
	stopped  int64   // when its accept loop ended
	closing  int64   // when it called daemon's Close (0: it does not)
	closed   int64   // when Close returned
	listened int64   // a lingering benchmark's server: when Listen returned,
	readied  int64   // when Ready returned,
	handed   int64   // and when Handed closed
	inflight sync.WaitGroup
	loop     sync.WaitGroup
	logs     string
}

func newEchoServer(base string) *echoServer {
	_, _, logs := echoDirs(base)
	return &echoServer{logs: logs, accepts: make([]int64, 0, 1<<16)}
}

// serve accepts on ln until Accept fails, answering each connection.
func (e *echoServer) serve(ln net.Listener) {
	e.serveWith(ln, func(c net.Conn) {
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			return
		}
		c.Write([]byte("pong\n"))
	})
}

// serveWith accepts on ln until Accept fails, and handles each connection
// with handle, which the deadline of ten seconds bounds; the connection is
// closed once handle returns.
func (e *echoServer) serveWith(ln net.Listener, handle func(net.Conn)) {
	e.loop.Add(1)
	e.started = monotonic()
	go func() {
		defer e.loop.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				e.mu.Lock()
				e.stopped = monotonic()
				e.mu.Unlock()
				return
			}
			t := monotonic()
			e.mu.Lock()
			e.accepts = append(e.accepts, t)
			e.mu.Unlock()
			e.inflight.Add(1)
			go func() {
				defer e.inflight.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				handle(c)
			}()
		}
	}()
}

// ready writes "<pid>.ready".
func (e *echoServer) ready() {
	writeAtomic(filepath.Join(e.logs, fmt.Sprintf("%d.ready", os.Getpid())), fmt.Sprintf("%d\n", monotonic()))
}

// requested notes when the restart (upgrade) request arrived; the first
// note stands.
func (e *echoServer) requested() {
	e.mu.Lock()
	if e.request == 0 {
		e.request = monotonic()
	}
	e.mu.Unlock()
}

// finish waits for the accept loop (whose listener the caller stopped) and
// the connections in flight.
func (e *echoServer) finish() {
	e.loop.Wait()
	e.inflight.Wait()
}

// close stamps a daemon server's Close.
func (e *echoServer) close(srv *daemon.Server) {
	e.closing = monotonic()
	srv.Close()
	e.closed = monotonic()
}

// write writes "<pid>.events".
func (e *echoServer) write() {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "request %d\nstarted %d\nstopped %d\nclosing %d\nclosed %d\n", e.request, e.started, e.stopped, e.closing, e.closed)
	fmt.Fprintf(&b, "listened %d\nreadied %d\nhanded %d\n", e.listened, e.readied, e.handed)
	for _, t := range e.accepts {
		fmt.Fprintf(&b, "accept %d\n", t)
	}
	for _, t := range e.streams {
		fmt.Fprintf(&b, "streamed %d\n", t)
	}
	writeAtomic(filepath.Join(e.logs, fmt.Sprintf("%d.events", os.Getpid())), b.String())
}

func writeAtomic(path, text string) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err == nil {
		os.Rename(tmp, path)
	}
}

// echo-daemon: ours with handover. daemon.Listen asks the server already
// there to restart now (its drain is instant: it finishes the connections
// it accepted, one line each), serve, Ready; on Leaving, finish what was
// accepted, Close and exit.
func echoDaemon(base string) int {
	return echoDaemonOn(base, runnerstate.Endpoint{Network: "unix", Address: echoSocket})
}

// echo-daemon-tcp: echo-daemon on a TCP port of the loopback.
func echoDaemonTCP(base string) int {
	return echoDaemonOn(base, runnerstate.Endpoint{Network: "tcp", Address: "127.0.0.1:0"})
}

func echoDaemonOn(base string, ep runnerstate.Endpoint) int {
	dir, _, _ := echoDirs(base)
	e := newEchoServer(base)
	ctx, cancel := context.WithTimeout(context.Background(), upgradeWait)
	srv, err := daemon.Listen(ctx, dir, daemon.Options{Program: echoProgram,
		Endpoints: []runnerstate.Endpoint{ep}, Version: os.Getenv(envEchoVer),
		Mode: runnerstate.RestartNow, Grace: upgradeWait})
	cancel()
	if err != nil {
		return fail(err)
	}
	e.serve(srv.Listeners()[0])
	if err := srv.Ready(nil); err != nil {
		return fail(err)
	}
	e.ready()
	<-srv.Leaving()
	e.requested()
	e.finish()
	e.close(srv)
	e.write()
	return 0
}

// echo-bind-anew: ours without handover, today's behaviour: Takeover
// (asking the server there to restart now), remove the leftover socket file,
// listen anew, Publish; on a restart request, close the listener, finish
// what was accepted, let go and exit.
func echoBindAnew(base string) int {
	dir, sock, _ := echoDirs(base)
	e := newEchoServer(base)
	ctx, cancel := context.WithTimeout(context.Background(), upgradeWait)
	release, err := runnerstate.Takeover(ctx, dir, runnerstate.TakeoverOptions{Mode: runnerstate.RestartNow, Grace: upgradeWait})
	cancel()
	if err != nil {
		return fail(err)
	}
	defer release()
	if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fail(err)
	}
	e.serve(ln)
	if err := runnerstate.Publish(dir, runnerstate.Record{Program: echoProgram, Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: sock}}}); err != nil {
		return fail(err)
	}
	e.ready()
	wctx, stop := context.WithCancel(context.Background())
	defer stop()
	<-runnerstate.WatchRestart(wctx, dir)
	e.requested()
	ln.Close()
	e.finish()
	e.write()
	return 0
}

// echo-tableflip: github.com/cloudflare/tableflip's documented flow. SIGHUP
// asks for an upgrade: Upgrade starts a copy of this process, which
// inherits the listener and calls Ready; then Exit closes in the old one,
// which closes its listener, finishes what it accepted and exits. SIGTERM
// stops it for good. Until Exit the old one accepts, also after its
// successor started to: the two overlap by design.
func echoTableflip(base string) int { return tableflipServer(base, (*echoServer).serve) }

// tableflipServer is echo-tableflip, its connections served by serve.
func tableflipServer(base string, serve func(*echoServer, net.Listener)) int {
	_, sock, _ := echoDirs(base)
	e := newEchoServer(base)
	upg, err := tableflip.New(tableflip.Options{UpgradeTimeout: upgradeWait})
	if err != nil {
		return fail(err)
	}
	defer upg.Stop()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM {
				upg.Stop()
				return
			}
			e.requested()
			if err := upg.Upgrade(); err != nil {
				fmt.Fprintln(os.Stderr, "tableflip: upgrade:", err)
			}
		}
	}()
	ln, err := upg.Listen("unix", sock)
	if err != nil {
		return fail(err)
	}
	serve(e, ln)
	if err := upg.Ready(); err != nil {
		return fail(err)
	}
	// Say so once the parent has exited: until then this copy's Upgrade
	// refuses ("parent hasn't exited").
	ctx, cancel := context.WithTimeout(context.Background(), upgradeWait)
	err = upg.WaitForParent(ctx)
	cancel()
	if err != nil {
		return fail(err)
	}
	e.ready()
	<-upg.Exit()
	ln.Close()
	e.finish()
	e.write()
	return 0
}

// ---------------------------------------------------------------------------
// The clients.

// Request outcomes, as a client records them.
const (
	reqOK = iota
	reqRefused
	reqNoSocket
	reqReset
	reqAgain
	reqTimeout
	reqOther
)

// upgrade-client: say "ready", then dial the echo socket, send one line,
// read the answer and close, in a loop, never trying a request again,
// pausing clientPause after each; when stdin closes, write every request
// (start and end in CLOCK_MONOTONIC ns, outcome) into
// logs/client-<pid>, say "done" and exit.
func upgradeClient(base string) int {
	_, sock, logs := echoDirs(base)
	var stop atomic.Bool
	go func() { drain(); stop.Store(true) }()
	type req struct {
		start, end int64
		outcome    int
	}
	reqs := make([]req, 0, 1<<15)
	buf := make([]byte, 16)
	fmt.Println("ready")
	for !stop.Load() {
		t0 := monotonic()
		outcome := reqOK
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err = c.Write([]byte("ping\n")); err == nil {
				var n int
				n, err = readLine(c, buf)
				if err == nil && string(buf[:n]) != "pong\n" {
					err = fmt.Errorf("answer %q", buf[:n])
				}
			}
			c.Close()
		}
		if err != nil {
			outcome = classify(err)
		}
		reqs = append(reqs, req{t0, monotonic(), outcome})
		time.Sleep(clientPause)
	}
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "%d %d %d\n", r.start, r.end, r.outcome)
	}
	writeAtomic(filepath.Join(logs, fmt.Sprintf("client-%d", os.Getpid())), b.String())
	fmt.Println("done")
	return 0
}

// readLine reads up to a newline into buf.
func readLine(c net.Conn, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if n > 0 && buf[n-1] == '\n' {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, errors.New("answer too long")
}

func classify(err error) int {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return reqRefused
	case errors.Is(err, syscall.ENOENT):
		return reqNoSocket
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF):
		return reqReset
	case errors.Is(err, syscall.EAGAIN):
		return reqAgain
	case errors.As(err, &ne) && ne.Timeout():
		return reqTimeout
	}
	return reqOther
}

// ---------------------------------------------------------------------------
// The harness of one scenario.

// serverProcs tracks a scenario's server processes: the ones it started,
// and tableflip's copies, which become its children (it is their
// subreaper) when their parent exits.
type serverProcs struct {
	b      *testing.B
	base   string
	role   string
	env    []string // added to each server's environment
	stderr *os.File
	cmds   map[int]*exec.Cmd
	known  map[int]bool
	reaped map[int]bool
}

func newServerProcs(b *testing.B, base, role string) *serverProcs {
	_, _, logs := echoDirs(base)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		b.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(logs, "stderr"))
	if err != nil {
		b.Fatal(err)
	}
	p := &serverProcs{b: b, base: base, role: role, stderr: stderr,
		cmds: map[int]*exec.Cmd{}, known: map[int]bool{}, reaped: map[int]bool{}}
	b.Cleanup(p.cleanup)
	return p
}

// start starts a server process and returns its pid.
func (p *serverProcs) start() int {
	cmd := testharness.Command(p.base)
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"="+p.role, "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, p.env...)
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		p.b.Fatal(err)
	}
	pid := cmd.Process.Pid
	p.cmds[pid], p.known[pid] = cmd, true
	return pid
}

// awaitReady waits for a server not yet known to say it is ready, and
// returns its pid.
func (p *serverProcs) awaitReady(want int) int {
	_, _, logs := echoDirs(p.base)
	deadline := time.Now().Add(upgradeWait)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir(logs)
		for _, e := range entries {
			s, ok := strings.CutSuffix(e.Name(), ".ready")
			if !ok {
				continue
			}
			pid, _ := strconv.Atoi(s)
			if (want != 0 && pid == want) || (want == 0 && !p.known[pid]) {
				p.known[pid] = true
				return pid
			}
		}
		time.Sleep(time.Millisecond)
	}
	p.b.Fatalf("no new %s server became ready within %v: %s", p.role, upgradeWait, p.errors())
	return 0
}

// reap waits for pid's exit.
func (p *serverProcs) reap(pid int) {
	if p.reaped[pid] {
		return
	}
	p.reaped[pid] = true
	if cmd, ok := p.cmds[pid]; ok {
		if err := cmd.Wait(); err != nil {
			p.b.Fatalf("%s server %d: %v: %s", p.role, pid, err, p.errors())
		}
		return
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			p.b.Fatalf("%s server %d: wait: %v", p.role, pid, err)
		}
		break
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		p.b.Fatalf("%s server %d ended with %v: %s", p.role, pid, ws, p.errors())
	}
}

// cleanup kills and reaps every server still there.
func (p *serverProcs) cleanup() {
	for pid := range p.known {
		if !p.reaped[pid] {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
	for pid := range p.known {
		if p.reaped[pid] {
			continue
		}
		p.reaped[pid] = true
		if cmd, ok := p.cmds[pid]; ok {
			cmd.Wait()
			continue
		}
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
	}
	p.stderr.Close()
}

func (p *serverProcs) errors() string {
	_, _, logs := echoDirs(p.base)
	data, _ := os.ReadFile(filepath.Join(logs, "stderr"))
	return strings.TrimSpace(string(data))
}

// upgradeSeen is one upgrade as the harness saw it.
type upgradeSeen struct {
	old, new int
	begun    int64 // the harness started the next server (or sent SIGHUP)
	done     int64 // the harness reaped the old server
}

// upgradeRun is what one scenario measured.
type upgradeRun struct {
	window, steady []time.Duration // successful requests' latencies
	lengths        []time.Duration // the upgrade windows' lengths
	failed, total  int
	byOutcome      [reqOther + 1]int
	overlaps       int             // accepts of an old server after its successor's first
	overlapping    int             // upgrades whose two accept loops ran at once
	overlapTimes   []time.Duration // how long they did, each upgrade (0: never)
	closes         []time.Duration // handing over: the old server's Close
	admits         []time.Duration // handing over: from its return to the successor's accept loop
	windows        []span          // the upgrade windows
	periods        []span          // the upgrades, as steady state leaves them out
}

// span is a stretch of CLOCK_MONOTONIC time, in ns.
type span struct{ from, to int64 }

// overlaps says whether from..to overlaps one of spans.
func overlaps(spans []span, from, to int64) bool {
	for _, s := range spans {
		if from <= s.to && to >= s.from {
			return true
		}
	}
	return false
}

// runUpgrade runs one scenario: a first server, eight clients, then
// upgradeCount upgrades steadyGap apart.
func runUpgrade(b *testing.B, impl string) upgradeRun {
	base, err := os.MkdirTemp("", "rsb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	dir, _, logs := echoDirs(base)
	role := map[string]string{"daemon-handover": "echo-daemon", "bind-anew": "echo-bind-anew", "tableflip": "echo-tableflip"}[impl]
	if impl == "tableflip" {
		// tableflip's copies outlive their parent: become their reaper.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			b.Fatal(err)
		}
		defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { // tableflip's socket is there too
		b.Fatal(err)
	}
	procs := newServerProcs(b, base, role)
	cur := procs.awaitReady(procs.start())

	var clients []*testharness.Child
	for range upgradeClients {
		clients = append(clients, testharness.Start(b, "upgrade-client", base))
	}
	for _, c := range clients {
		c.Expect("ready")
	}
	time.Sleep(steadyGap)
	var hs []upgradeSeen
	for range upgradeCount {
		h := upgradeSeen{old: cur, begun: monotonic()}
		if impl == "tableflip" {
			if err := unix.Kill(cur, unix.SIGHUP); err != nil {
				b.Fatal(err)
			}
			h.new = procs.awaitReady(0)
		} else {
			h.new = procs.awaitReady(procs.start())
		}
		procs.reap(h.old)
		h.done = monotonic()
		hs = append(hs, h)
		cur = h.new
		time.Sleep(steadyGap)
	}
	for _, c := range clients {
		c.CloseStdin()
	}
	for _, c := range clients {
		c.Expect("done")
		c.Wait()
	}
	switch impl {
	case "daemon-handover":
		ctx, cancel := context.WithTimeout(context.Background(), upgradeWait)
		err := daemon.Stop(ctx, dir, runnerstate.RestartNow)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	case "bind-anew":
		if err := runnerstate.RequestRestart(dir, runnerstate.RestartNow); err != nil {
			b.Fatal(err)
		}
	case "tableflip":
		unix.Kill(cur, unix.SIGTERM)
	}
	procs.reap(cur)
	return measureUpgrade(b, logs, hs, true)
}

// serverEvents are one server's events file.
type serverEvents struct {
	request, started, stopped, closing, closed int64
	listened, readied, handed                  int64
	accepts                                    []int64
	streams                                    []int64
}

func readEvents(b *testing.B, logs string, pid int) serverEvents {
	data, err := os.ReadFile(filepath.Join(logs, fmt.Sprintf("%d.events", pid)))
	if err != nil {
		b.Fatal(err)
	}
	var ev serverEvents
	for line := range strings.Lines(string(data)) {
		kind, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		t, _ := strconv.ParseInt(v, 10, 64)
		switch kind {
		case "request":
			ev.request = t
		case "started":
			ev.started = t
		case "stopped":
			ev.stopped = t
		case "closing":
			ev.closing = t
		case "closed":
			ev.closed = t
		case "listened":
			ev.listened = t
		case "readied":
			ev.readied = t
		case "handed":
			ev.handed = t
		case "accept":
			ev.accepts = append(ev.accepts, t)
		case "streamed":
			ev.streams = append(ev.streams, t)
		}
	}
	return ev
}

// measureUpgrade reads the servers' and clients' logs. An upgrade's window
// runs from the old server's restart request (for tableflip, the SIGHUP it
// received; handing over, the moment it stopped accepting, a little
// earlier) to its successor's first accept; a request is in it when the
// two overlap. Steady state is every request that overlaps no upgrade at
// all, from the harness starting the next server to settle after it
// reaped the old one. Without loops, the window starts at the old
// server's last accept before its successor's first. With loops, two servers whose accept loops ran at
// once count as accepting at once; without (a lingering server's Accept
// blocks, returning nothing, from its step-down until its loop ends), only
// an accept by the old server after its successor's first counts.
func measureUpgrade(b *testing.B, logs string, hs []upgradeSeen, loops bool) upgradeRun {
	var run upgradeRun
	var windows, periods []span
	for _, h := range hs {
		old, next := readEvents(b, logs, h.old), readEvents(b, logs, h.new)
		if old.request == 0 {
			b.Fatalf("upgrade %d→%d: the old server saw no restart request", h.old, h.new)
		}
		if len(next.accepts) == 0 {
			continue // no client reached it (a machine too busy): no window to measure
		}
		first := next.accepts[0]
		// Handing over, the old server stops accepting a little before
		// its Leaving closes: the window starts there.
		from := old.request
		if old.stopped != 0 {
			from = min(from, old.stopped)
		}
		if !loops {
			// A lingering server's Accept blocks from its step-down,
			// and its Leaving closes once its successor is ready: the
			// window starts at its last accept before its successor's
			// first (at the harness's start of the successor if none).
			from = h.begun
			for _, t := range old.accepts {
				if t < first {
					from = max(from, t)
				}
			}
		}
		windows = append(windows, span{from, max(first, from)})
		run.lengths = append(run.lengths, time.Duration(max(first-from, 0)))
		periods = append(periods, span{min(h.begun, from), max(h.done, first) + int64(settle)})
		if old.closing != 0 {
			run.closes = append(run.closes, time.Duration(old.closed-old.closing))
			run.admits = append(run.admits, time.Duration(next.started-old.closed))
		}
		n := 0
		for _, t := range old.accepts {
			if t > first {
				n++
			}
		}
		run.overlaps += n
		both := time.Duration(max(old.stopped-next.started, 0))
		if !loops {
			both = 0
		}
		run.overlapTimes = append(run.overlapTimes, both)
		if both > 0 || n > 0 {
			run.overlapping++
		}
	}
	run.windows, run.periods = windows, periods
	logLines(b, logs, func(name string) bool { return strings.HasPrefix(name, "client-") }, func(_, line string) {
		f := strings.Fields(line)
		if len(f) != 3 {
			return
		}
		start, _ := strconv.ParseInt(f[0], 10, 64)
		end, _ := strconv.ParseInt(f[1], 10, 64)
		outcome, _ := strconv.Atoi(f[2])
		run.total++
		run.byOutcome[outcome]++
		if outcome != reqOK {
			run.failed++
			return
		}
		d := time.Duration(end - start)
		switch {
		case overlaps(windows, start, end):
			run.window = append(run.window, d)
		case !overlaps(periods, start, end):
			run.steady = append(run.steady, d)
		}
	})
	return run
}

// Upgrade under load: eight client processes that never try a request
// again (dial, one line, read the answer, close, pause 1 ms, in a loop)
// through 20 upgrades of a small echo server, three ways, in one run:
// ours with handover (daemon.Listen, restart now: the old server's drain
// is instant), ours without it (Takeover plus net.Listen, binding anew:
// the behaviour before package daemon), and cloudflare/tableflip's upgrade
// (SIGHUP; the old one exits once the new one is ready). Each iteration
// runs the whole scenario (about 5 s); run it with -benchtime 1x, or
// leave the default 1s, which stops after the first.
//
// It reports, per scenario: failed requests (refused, no socket, reset,
// unanswered), their share, the clients' p50 and p99 latency of the
// requests in the upgrade windows and in steady state, the windows' p50
// length, and overlaps: accepts of an old server after its successor's
// first accept, the upgrades in which the two servers' accept loops ran at
// once (from the new one's start of Accept to the old one's last return
// from it), and how long they did at p50. Handing over, where the window goes: the
// old server's Close (close-p50-µs), and from its return to the
// successor's accept loop (close-to-next-p50-µs: the old process's exit,
// the successor's admission and the rest of its Listen).
func BenchmarkUpgrade(b *testing.B) {
	for _, impl := range []string{"daemon-handover", "bind-anew", "tableflip"} {
		b.Run("impl="+impl, func(b *testing.B) {
			var all upgradeRun
			for b.Loop() {
				r := runUpgrade(b, impl)
				all.window = append(all.window, r.window...)
				all.steady = append(all.steady, r.steady...)
				all.lengths = append(all.lengths, r.lengths...)
				all.overlapTimes = append(all.overlapTimes, r.overlapTimes...)
				all.closes = append(all.closes, r.closes...)
				all.admits = append(all.admits, r.admits...)
				all.failed += r.failed
				all.total += r.total
				all.overlaps += r.overlaps
				all.overlapping += r.overlapping
				for i, n := range r.byOutcome {
					all.byOutcome[i] += n
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(all.failed)/n, "failed")
			b.ReportMetric(float64(all.byOutcome[reqRefused]+all.byOutcome[reqNoSocket])/n, "refused")
			b.ReportMetric(float64(all.total)/n, "requests")
			b.ReportMetric(quantile(all.window, 0.50), "win-p50-µs")
			b.ReportMetric(quantile(all.window, 0.99), "win-p99-µs")
			b.ReportMetric(quantile(all.steady, 0.50), "steady-p50-µs")
			b.ReportMetric(quantile(all.steady, 0.99), "steady-p99-µs")
			b.ReportMetric(quantile(all.lengths, 0.50), "win-len-p50-µs")
			b.ReportMetric(float64(all.overlaps)/n, "overlaps")
			b.ReportMetric(float64(all.overlapping)/n, "overlap-handoffs")
			b.ReportMetric(quantile(all.overlapTimes, 0.50), "overlap-p50-µs")
			if len(all.closes) > 0 {
				b.ReportMetric(quantile(all.closes, 0.50), "close-p50-µs")
				b.ReportMetric(quantile(all.admits, 0.50), "close-to-next-p50-µs")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// quantile is the q quantile of d in µs; 0 for none (binding anew, every
// request in the windows may fail).
func quantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))].Nanoseconds()) / 1e3
}

// ---------------------------------------------------------------------------
// Dial to a ready server, against what it replaces: Start's fast path and
// a net.Dial of the endpoint its record names. Dial checks who accepted
// (SO_PEERCRED over the unix socket; over TCP, one sock_diag query for the
// listener's uid); net.Dial does not.

func BenchmarkDialReady(b *testing.B) { dialReady(b, "echo-daemon") }

func BenchmarkDialReadyTCP(b *testing.B) { dialReady(b, "echo-daemon-tcp") }

func dialReady(b *testing.B, role string) {
	base, err := os.MkdirTemp("", "rsb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	dir, _, _ := echoDirs(base)
	procs := newServerProcs(b, base, role)
	srv := procs.awaitReady(procs.start())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
		defer cancel()
		if err := daemon.Stop(ctx, dir, runnerstate.RestartNow); err != nil {
			b.Fatal(err)
		}
		procs.reap(srv)
	}()
	cmd := exec.Command(filepath.Join(base, "never-started"))
	ctx := context.Background()
	start := func() {
		rec, err := runnerstate.Start(ctx, dir, cmd, runnerstate.StartOptions{})
		if err != nil || len(rec.Endpoints) == 0 {
			b.Fatal(rec, err)
		}
		c, err := net.Dial(rec.Endpoints[0].Network, rec.Endpoints[0].Address)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	dial := func() {
		c, _, err := daemon.Dial(ctx, dir, cmd, daemon.DialOptions{Program: echoProgram})
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	b.Run("impl=Start+net.Dial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			start()
		}
	})
	b.Run("impl=Dial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			dial()
		}
	})
	b.Run("impl=interleaved", func(b *testing.B) {
		var tStart, tDial time.Duration
		for b.Loop() {
			t0 := time.Now()
			start()
			t1 := time.Now()
			dial()
			tStart, tDial = tStart+t1.Sub(t0), tDial+time.Since(t1)
		}
		b.ReportMetric(float64(tDial)/float64(tStart), "dial/start")
	})
}

// ---------------------------------------------------------------------------
// Idle exit: a server that Dial started, with IdleTimeout, serves one
// connection; from the client's close of it plus IdleTimeout to Running
// showing the directory free (polled every 100 µs): p50-µs, p99-µs,
// max-µs. Beside them, from the same instant, the server's own stamps:
// its Leaving closed (leaving-p50-µs) and its Close returned, the lock
// released (closed-p50-µs). The server closes its side once it answered,
// a little before the client does: its idle clock starts there.

const idleTimeout = 100 * time.Millisecond

func BenchmarkIdleExit(b *testing.B) {
	var lat, leaving, closing []time.Duration
	for b.Loop() {
		base, err := os.MkdirTemp("", "rsb")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(base) })
		dir, _, logs := echoDirs(base)
		if err := os.MkdirAll(logs, 0o755); err != nil {
			b.Fatal(err)
		}
		cmd := testharness.Command(base)
		cmd.Env = append(os.Environ(), testharness.RoleEnv+"=echo-daemon-idle", "GORACE=atexit_sleep_ms=0")
		ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
		c, _, err := daemon.Dial(ctx, dir, cmd, daemon.DialOptions{Program: echoProgram})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(testharness.Wait))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			b.Fatal(err)
		}
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			b.Fatal(err)
		}
		c.Close()
		closedAt := monotonic()
		closed := time.Now()
		deadline := closed.Add(testharness.Wait)
		for {
			_, held, err := runnerstate.Running(dir)
			if err != nil {
				b.Fatal(err)
			}
			if !held {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the idle server of %s did not let go within %v", dir, testharness.Wait)
			}
			time.Sleep(100 * time.Microsecond)
		}
		lat = append(lat, time.Since(closed)-idleTimeout)
		awaitEnded(b, dir)
		data, err := os.ReadFile(filepath.Join(logs, "idle"))
		if err != nil {
			b.Fatal(err)
		}
		var left, released int64
		if _, err := fmt.Sscan(string(data), &left, &released); err != nil {
			b.Fatal(err)
		}
		leaving = append(leaving, time.Duration(left-closedAt)-idleTimeout)
		closing = append(closing, time.Duration(released-closedAt)-idleTimeout)
	}
	reportLatency(b, "idle-exit", lat)
	b.ReportMetric(p50(leaving), "leaving-p50-µs")
	b.ReportMetric(p50(closing), "closed-p50-µs")
}

// awaitEnded waits until the starter has recorded the runner's exit in
// start.json (its reaper writes there once the runner has exited).
func awaitEnded(b *testing.B, dir string) {
	deadline := time.Now().Add(testharness.Wait)
	for {
		attempt, _ := os.ReadFile(filepath.Join(dir, "start.json"))
		if strings.Contains(string(attempt), `"ended"`) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the server of %s was not reaped", dir)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func init() {
	// echo-daemon-idle: echo-daemon with IdleTimeout, as Dial starts it.
	roles["echo-daemon-idle"] = func(base string) int {
		dir, _, _ := echoDirs(base)
		e := newEchoServer(base)
		ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
		srv, err := daemon.Listen(ctx, dir, daemon.Options{Program: echoProgram,
			Endpoints:   []runnerstate.Endpoint{{Network: "unix", Address: echoSocket}},
			IdleTimeout: idleTimeout})
		cancel()
		if err != nil {
			return fail(err)
		}
		e.serve(srv.Listeners()[0])
		if err := srv.Ready(nil); err != nil {
			return fail(err)
		}
		<-srv.Leaving()
		left := monotonic()
		e.finish()
		e.close(srv)
		writeAtomic(filepath.Join(base, "logs", "idle"), fmt.Sprintf("%d %d\n", left, e.closed))
		return 0
	}
}

// logLines calls fn with each line of each file in logs whose name keep
// accepts, and that file's name.
func logLines(b *testing.B, logs string, keep func(name string) bool, fn func(name, line string)) {
	entries, err := os.ReadDir(logs)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		if !keep(e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(logs, e.Name()))
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			fn(e.Name(), line)
		}
	}
}
