//go:build linux

package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/daemon"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"golang.org/x/sys/unix"
)

// Upgrades that never wait for a drain (package daemon's Options.Linger).
// The server is the echo server of daemon_test.go on the raw protocol of
// its Listeners (no HTTP): a connection's first line "ping" is answered
// "pong"; "stream" gets a line every 100 ms for 3 s, then "end". Beside 8
// per-request clients (upgrade-client: connect, one request, close, never
// try again), 100 streaming clients (4 processes of 25) each read one
// stream to its end and connect again; a stream that ends without "end"
// was cut. The server's code is the same for the lingering way and for
// today's drain: on Leaving it finishes what it accepted, calls Close and
// exits; only Options.Linger differs (setLinger). tableflip's server
// serves the same protocol, and its old process finishes its streams too.
//
// Both benchmarks run only when BENCH_LINGER_UPGRADES is set (10 for the
// figures of docs/benchmarks.md: about 2.5 minutes, and 10 s a run of the
// killed successors), so that CI's run of every benchmark once stays as
// short as it was.

func init() {
	roles["linger-server"] = lingerServer
	roles["linger-tableflip"] = func(base string) int { return tableflipServer(base, (*echoServer).serveStreams) }
	roles["linger-successor"] = lingerSuccessor
	roles["stream-client"] = streamClient
}

const (
	envLingerUpgrades = "BENCH_LINGER_UPGRADES"
	envServerLinger   = "BENCH_SERVER_LINGER" // the server's Linger, a Go duration
	envStreams        = "BENCH_STREAMS"       // a stream-client's count of streams
	// envLingerLog names a file the servers append package daemon's log
	// to (Options.Logger), to see where an upgrade's time went.
	envLingerLog = "BENCH_LINGER_LOG"
	// lingerFor is the lingering way's Options.Linger.
	lingerFor = 5 * time.Second
	// lingerGap is the time from one upgrade's start to the next one's.
	lingerGap     = 4 * time.Second
	streamClients = 100
	streamProcs   = 4
	streamLines   = 30
	streamEvery   = 100 * time.Millisecond
	streamLength  = streamLines * streamEvery
	// streamWait bounds one stream at the client: its length, and a wait in
	// the backlog through a drain as long.
	streamWait = 20 * time.Second
	// killWithin: a successor is killed at a uniformly random moment in
	// this long after its start, before it is ready (it never calls Ready).
	killWithin = 100 * time.Millisecond
	// killPause is the steady state between two killed successors.
	killPause = 200 * time.Millisecond
	// streamCut is a stream's outcome when it connected and ended without
	// "end" (the other outcomes are the requests' own: reqOK…).
	streamCut = reqOther + 1
)

// lingerUpgrades is BENCH_LINGER_UPGRADES: the count of upgrades of a
// scenario (and half the count of killed successors); 0 when unset.
func lingerUpgrades() int {
	n, err := strconv.Atoi(os.Getenv(envLingerUpgrades))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// serveStreams serves the protocol above on ln.
func (e *echoServer) serveStreams(ln net.Listener) {
	e.serveWith(ln, func(c net.Conn) {
		line, err := bufio.NewReader(c).ReadString('\n')
		switch {
		case err != nil:
		case line == "ping\n":
			c.Write([]byte("pong\n"))
		case line == "stream\n":
			tick := time.NewTicker(streamEvery)
			defer tick.Stop()
			for i := range streamLines {
				if i > 0 {
					<-tick.C
				}
				if _, err := fmt.Fprintf(c, "line %d\n", i); err != nil {
					return
				}
			}
			<-tick.C
			if _, err := c.Write([]byte("end\n")); err == nil {
				t := monotonic()
				e.mu.Lock()
				e.streams = append(e.streams, t)
				e.mu.Unlock()
			}
		}
	})
}

// listenLinger is the servers' daemon.Listen: the unix socket, a drain
// asked of the server already there, and Linger from the environment.
func listenLinger(dir string) (*daemon.Server, error) {
	linger, err := time.ParseDuration(os.Getenv(envServerLinger))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envServerLinger, err)
	}
	opts := daemon.Options{Program: echoProgram,
		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: echoSocket}},
		Mode:      runnerstate.RestartDrain, Grace: upgradeWait}
	if err := setLinger(&opts, linger); err != nil {
		return nil, err
	}
	if path := os.Getenv(envLingerLog); path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		opts.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})).With("pid", os.Getpid())
	}
	ctx, cancel := context.WithTimeout(context.Background(), upgradeWait)
	defer cancel()
	return daemon.Listen(ctx, dir, opts)
}

// linger-server: Listen (asking the server there to drain), serve the
// protocol, Ready; on Leaving finish what it accepted (its streams run to
// their end), Close and exit. A lingering server's Leaving closes once its
// successor is ready; today's, at the drain request.
func lingerServer(base string) int {
	dir, _, _ := echoDirs(base)
	e := newEchoServer(base)
	srv, err := listenLinger(dir)
	if err != nil {
		return fail(err)
	}
	e.listened = monotonic()
	go func() {
		<-srv.Handed()
		t := monotonic()
		e.mu.Lock()
		e.handed = t
		e.mu.Unlock()
	}()
	e.serveStreams(srv.Listeners()[0])
	if err := srv.Ready(nil); err != nil {
		return fail(err)
	}
	e.readied = monotonic()
	e.ready()
	<-srv.Leaving()
	e.requested()
	writeAtomic(filepath.Join(e.logs, fmt.Sprintf("%d.leaving", os.Getpid())), fmt.Sprintf("%d %s\n", monotonic(), srv.Reason()))
	e.finish()
	e.close(srv)
	e.write()
	return 0
}

// linger-successor: a successor that is killed before it is ready: it
// stamps its start ("<pid>.started") and Listen's return
// ("<pid>.listening"), and never calls Ready.
func lingerSuccessor(base string) int {
	dir, _, logs := echoDirs(base)
	stamp := func(what string) {
		writeAtomic(filepath.Join(logs, fmt.Sprintf("%d.%s", os.Getpid(), what)), fmt.Sprintf("%d\n", monotonic()))
	}
	stamp("started")
	if _, err := listenLinger(dir); err != nil {
		return fail(err)
	}
	stamp("listening")
	time.Sleep(upgradeWait) // the harness kills it long before
	return fail(fmt.Errorf("not killed within %v", upgradeWait))
}

// stream-client: say "ready", then run BENCH_STREAMS streams at once, each
// starting at a random moment of the first stream's length, then one after
// another until stdin closes; then finish the streams under way, write one
// line per stream into logs/stream-<pid> (its start, its first line's and
// its end's CLOCK_MONOTONIC ns, its outcome, its lines), say "done", exit.
func streamClient(base string) int {
	_, sock, logs := echoDirs(base)
	n, err := strconv.Atoi(os.Getenv(envStreams))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", envStreams, err))
	}
	var stop atomic.Bool
	go func() { drain(); stop.Store(true) }()
	type stream struct {
		start, first, end int64
		outcome, lines    int
	}
	var mu sync.Mutex
	var all []stream
	var wg sync.WaitGroup
	fmt.Println("ready")
	for range n {
		wg.Go(func() {
			time.Sleep(rand.N(streamLength))
			for !stop.Load() {
				s := stream{start: monotonic(), outcome: streamCut}
				c, err := net.Dial("unix", sock)
				if err != nil {
					s.outcome = classify(err)
				} else {
					c.SetDeadline(time.Now().Add(streamWait))
					if _, err := c.Write([]byte("stream\n")); err == nil {
						r := bufio.NewReader(c)
						for {
							line, err := r.ReadString('\n')
							if err != nil {
								break
							}
							if s.first == 0 {
								s.first = monotonic()
							}
							if line == "end\n" {
								s.outcome = reqOK
								break
							}
							s.lines++
						}
					}
					c.Close()
				}
				s.end = monotonic()
				mu.Lock()
				all = append(all, s)
				mu.Unlock()
				if s.outcome != reqOK && s.outcome != streamCut {
					time.Sleep(clientPause) // a refused connect: do not spin
				}
			}
		})
	}
	wg.Wait()
	var b strings.Builder
	for _, s := range all {
		fmt.Fprintf(&b, "%d %d %d %d %d\n", s.start, s.first, s.end, s.outcome, s.lines)
	}
	writeAtomic(filepath.Join(logs, fmt.Sprintf("stream-%d", os.Getpid())), b.String())
	fmt.Println("done")
	return 0
}

// lingerClients starts the per-request and the streaming clients.
func lingerClients(b *testing.B, base string) []*testharness.Child {
	var clients []*testharness.Child
	for range upgradeClients {
		clients = append(clients, testharness.Start(b, "upgrade-client", base))
	}
	for range streamProcs {
		cmd := testharness.Command(base)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", envStreams, streamClients/streamProcs))
		clients = append(clients, testharness.StartCmd(b, cmd, "stream-client"))
	}
	for _, c := range clients {
		c.Expect("ready")
	}
	return clients
}

// stopClients ends the clients; the streams under way run to their end.
func stopClients(clients []*testharness.Child) {
	for _, c := range clients {
		c.CloseStdin()
	}
	for _, c := range clients {
		c.Expect("done")
		c.Wait()
	}
}

// streamRun is what the streaming clients saw.
type streamRun struct {
	total, cut, failed int             // streams; connected and cut; never connected
	window, steady     []time.Duration // from the connect to the first line
}

// measureStreams reads the streaming clients' logs; a stream is in a
// window when its connect to its first line overlaps one, in steady state
// when that overlaps no upgrade (run's spans).
func measureStreams(b *testing.B, logs string, run upgradeRun) streamRun {
	var sr streamRun
	logLines(b, logs, func(name string) bool { return strings.HasPrefix(name, "stream-") }, func(name, line string) {
		var start, first, end int64
		var outcome, lines int
		if _, err := fmt.Sscan(line, &start, &first, &end, &outcome, &lines); err != nil {
			b.Fatalf("%s: %q: %v", name, line, err)
		}
		sr.total++
		switch outcome {
		case reqOK:
		case streamCut:
			sr.cut++
		default:
			sr.failed++
		}
		if first == 0 {
			return
		}
		d := time.Duration(first - start)
		switch {
		case overlaps(run.windows, start, first):
			sr.window = append(sr.window, d)
		case !overlaps(run.periods, start, first):
			sr.steady = append(sr.steady, d)
		}
	})
	return sr
}

// lingerRun is one scenario of BenchmarkLinger.
type lingerRun struct {
	upgradeRun
	streams  streamRun
	lingered int // streams an old server ran to their end after its successor's first accept
	// From each window's start to the successor's Listen and Ready returning.
	toListen, toReady []time.Duration
}

// runLinger runs one scenario: a first server, the clients, a stream's
// length of steady state, then upgrades lingerGap apart.
func runLinger(b *testing.B, impl string, upgrades int) lingerRun {
	base, err := os.MkdirTemp("", "rsb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	dir, _, logs := echoDirs(base)
	role, linger := "linger-server", time.Duration(0)
	switch impl {
	case "lingering":
		linger = lingerFor
	case "tableflip":
		role = "linger-tableflip"
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			b.Fatal(err)
		}
		defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	procs := newServerProcs(b, base, role)
	procs.env = []string{envServerLinger + "=" + linger.String()}
	cur := procs.awaitReady(procs.start())
	clients := lingerClients(b, base)
	time.Sleep(streamLength)
	var hs []upgradeSeen
	next := time.Now()
	for range upgrades {
		time.Sleep(time.Until(next))
		next = time.Now().Add(lingerGap)
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
	}
	time.Sleep(time.Until(next))
	stopClients(clients)
	if impl == "tableflip" {
		unix.Kill(cur, unix.SIGTERM)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), upgradeWait)
		err := daemon.Stop(ctx, dir, runnerstate.RestartNow)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	procs.reap(cur)
	r := lingerRun{upgradeRun: measureUpgrade(b, logs, hs, impl != "lingering")}
	r.streams = measureStreams(b, logs, r.upgradeRun)
	var parts []string
	k := 0
	for _, h := range hs {
		old, next := readEvents(b, logs, h.old), readEvents(b, logs, h.new)
		if len(next.accepts) == 0 {
			continue
		}
		for _, t := range old.streams {
			if t > next.accepts[0] {
				r.lingered++
			}
		}
		// Where the window went: from its start to the successor's
		// Listen returning, its Ready returning, its first accept; the
		// old server's Handed; the upgrade from its start to the old
		// server reaped.
		from := r.windows[k].from
		k++
		if next.listened != 0 {
			r.toListen = append(r.toListen, time.Duration(next.listened-from))
			r.toReady = append(r.toReady, time.Duration(next.readied-from))
		}
		ms := func(t int64) string {
			if t == 0 {
				return "-"
			}
			return strconv.FormatFloat(float64(t-from)/1e6, 'f', 1, 64)
		}
		parts = append(parts, fmt.Sprintf("%s/%s/%s/%s/%s", ms(next.listened), ms(next.readied), ms(next.accepts[0]), ms(old.handed), ms(h.done)))
	}
	b.Logf("%s, each upgrade, ms from its window's start: the successor's Listen returned / its Ready returned / its first accept / the old server's Handed / the old server reaped: %s",
		impl, strings.Join(parts, " "))
	return r
}

// Upgrades that never wait for a drain: 8 per-request client processes
// that never retry and 100 streaming clients (a line every 100 ms for 3 s,
// then connect again), through BENCH_LINGER_UPGRADES upgrades 4 s apart,
// three ways in one run: lingering (daemon.Listen with Linger 5 s, asking
// for a drain), today's drain (the same with Linger 0), and tableflip (its
// old process finishes its streams after its successor is ready).
//
// Per way: failed requests, refused, requests; streams, streams cut early,
// streams that never connected; the requests' p50/p99 in the windows and
// in steady state (measureUpgrade's windows; a lingering server's window
// starts at its last accept), the streams' connect to first line there
// too; upgrades with two servers accepting (for lingering: an accept by
// the old server after its successor's first; the others as in
// BenchmarkUpgrade); streams that old servers ran to their end after their
// successor's first accept.
func BenchmarkLinger(b *testing.B) {
	n := lingerUpgrades()
	if n == 0 {
		b.Skipf("set %s=10 to run it (10 upgrades 4 s apart, three ways: about 2.5 minutes)", envLingerUpgrades)
	}
	for _, impl := range []string{"lingering", "drain", "tableflip"} {
		b.Run("impl="+impl, func(b *testing.B) {
			var all lingerRun
			for b.Loop() {
				r := runLinger(b, impl, n)
				all.window = append(all.window, r.window...)
				all.steady = append(all.steady, r.steady...)
				all.lengths = append(all.lengths, r.lengths...)
				all.streams.window = append(all.streams.window, r.streams.window...)
				all.streams.steady = append(all.streams.steady, r.streams.steady...)
				all.failed += r.failed
				all.total += r.total
				all.overlaps += r.overlaps
				all.overlapping += r.overlapping
				all.streams.total += r.streams.total
				all.streams.cut += r.streams.cut
				all.streams.failed += r.streams.failed
				all.lingered += r.lingered
				all.toListen = append(all.toListen, r.toListen...)
				all.toReady = append(all.toReady, r.toReady...)
				for i, n := range r.byOutcome {
					all.byOutcome[i] += n
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(all.failed)/n, "failed")
			b.ReportMetric(float64(all.byOutcome[reqRefused]+all.byOutcome[reqNoSocket])/n, "refused")
			b.ReportMetric(float64(all.total)/n, "requests")
			b.ReportMetric(float64(all.streams.total)/n, "streams")
			b.ReportMetric(float64(all.streams.cut)/n, "streams-cut")
			b.ReportMetric(float64(all.streams.failed)/n, "streams-failed")
			b.ReportMetric(float64(all.lingered)/n, "streams-after-handover")
			b.ReportMetric(quantile(all.window, 0.50), "win-p50-µs")
			b.ReportMetric(quantile(all.window, 0.99), "win-p99-µs")
			b.ReportMetric(quantile(all.steady, 0.50), "steady-p50-µs")
			b.ReportMetric(quantile(all.steady, 0.99), "steady-p99-µs")
			b.ReportMetric(quantile(all.lengths, 0.50), "win-len-p50-µs")
			b.ReportMetric(quantile(all.streams.window, 0.99), "stream-win-p99-µs")
			b.ReportMetric(quantile(all.streams.steady, 0.99), "stream-steady-p99-µs")
			if len(all.toListen) > 0 {
				b.ReportMetric(quantile(all.toListen, 0.50), "win-to-listen-p50-µs")
				b.ReportMetric(quantile(all.toReady, 0.50), "win-to-ready-p50-µs")
			}
			b.ReportMetric(quantile(all.lengths, 0.99), "win-len-p99-µs")
			b.ReportMetric(float64(all.overlaps)/n, "overlaps")
			b.ReportMetric(float64(all.overlapping)/n, "overlap-handoffs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// ---------------------------------------------------------------------------
// A successor killed before it is ready.

// killRun is one scenario of BenchmarkLingerKill.
type killRun struct {
	upgradeRun
	streams                   streamRun
	back                      []time.Duration // from each kill to the old server's next accept
	left                      int             // kills after which the old server left instead of serving on
	early, inListen, listened int             // kills before the successor's start, in its Listen, after it
}

// runKills runs one scenario: a lingering server, the clients, then kills
// successors kills times, killPause apart.
func runKills(b *testing.B, kills int) killRun {
	base, err := os.MkdirTemp("", "rsb")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	dir, _, logs := echoDirs(base)
	procs := newServerProcs(b, base, "linger-server")
	procs.env = []string{envServerLinger + "=" + lingerFor.String()}
	old := procs.awaitReady(procs.start())
	clients := lingerClients(b, base)
	time.Sleep(streamLength / 3)
	type kill struct {
		pid, server int // the successor killed, the server it was to replace
		at          int64
		left        bool // the server left instead of serving on
	}
	var ks []kill
	for range kills {
		pid, at := killSuccessor(b, procs, base)
		k := kill{pid: pid, server: old, at: at}
		err := awaitServing(procs, dir, old)
		if err == nil {
			time.Sleep(killPause)
			err = notLeaving(logs, old)
		}
		var le leavingError
		switch {
		case errors.As(err, &le):
			// It leaves as with Linger 0 (draining, then handing its
			// sockets to whoever waits): count it, and start the
			// server that would replace it, which waits for its drain.
			b.Logf("successor %d killed %s: %v", pid, killedWhere(logs, pid, at), err)
			k.left = true
			next := procs.awaitReady(procs.start())
			procs.reap(old)
			old = next
		case err != nil:
			rep, _ := runnerstate.Status(dir)
			status, _ := json.Marshal(rep)
			b.Fatalf("successor %d killed %s: %v; status: %s; %s", pid, killedWhere(logs, pid, at), err, status, procs.errors())
		}
		ks = append(ks, k)
	}
	stopClients(clients)
	ctx, cancel := context.WithTimeout(context.Background(), upgradeWait)
	err = daemon.Stop(ctx, dir, runnerstate.RestartNow)
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	procs.reap(old)
	r := killRun{upgradeRun: measureUpgrade(b, logs, nil, false)}
	r.streams = measureStreams(b, logs, r.upgradeRun)
	events := map[int]serverEvents{}
	backs := map[string][]time.Duration{}
	for _, k := range ks {
		if k.left {
			r.left++
			continue
		}
		ev, ok := events[k.server]
		if !ok {
			ev = readEvents(b, logs, k.server)
			events[k.server] = ev
		}
		i := 0
		for i < len(ev.accepts) && ev.accepts[i] < k.at {
			i++
		}
		if i == len(ev.accepts) {
			b.Fatalf("the old server %d accepted nothing after the kill of its successor %d", k.server, k.pid)
		}
		back := time.Duration(ev.accepts[i] - k.at)
		r.back = append(r.back, back)
		where := killedWhere(logs, k.pid, k.at)
		switch where {
		case "before its start":
			r.early++
		case "after its Listen":
			r.listened++
		default:
			r.inListen++
		}
		backs[where] = append(backs[where], back.Round(10*time.Microsecond))
	}
	for _, where := range []string{"before its start", "in its Listen", "after its Listen"} {
		slices.Sort(backs[where])
		b.Logf("%d successors killed %s: the old server accepted again after %v", len(backs[where]), where, backs[where])
	}
	return r
}

// killSuccessor starts a linger-successor, kills it with SIGKILL at a
// random moment within killWithin, and reaps it; it returns its pid and
// the moment of the kill.
func killSuccessor(b *testing.B, procs *serverProcs, base string) (int, int64) {
	cmd := testharness.Command(base)
	cmd.Env = append(os.Environ(), testharness.RoleEnv+"=linger-successor", envServerLinger+"="+lingerFor.String())
	cmd.Stderr = procs.stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	time.Sleep(rand.N(killWithin))
	at := monotonic()
	if err := cmd.Process.Kill(); err != nil {
		b.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		b.Fatalf("successor %d exited before its kill: %s", cmd.Process.Pid, procs.errors())
	}
	return cmd.Process.Pid, at
}

// killedWhere says where the kill at at fell in successor pid's start.
func killedWhere(logs string, pid int, at int64) string {
	switch {
	case !stampedBefore(logs, pid, "started", at):
		return "before its start"
	case stampedBefore(logs, pid, "listening", at):
		return "after its Listen"
	}
	return "in its Listen"
}

// stampedBefore says whether pid wrote logs/<pid>.<what> with a time
// before at.
func stampedBefore(logs string, pid int, what string, at int64) bool {
	data, err := os.ReadFile(filepath.Join(logs, fmt.Sprintf("%d.%s", pid, what)))
	if err != nil {
		return false
	}
	t, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return err == nil && t < at
}

// awaitServing waits until old holds dir again, ready, and answers a ping.
func awaitServing(procs *serverProcs, dir string, old int) error {
	_, sock, logs := echoDirs(procs.base)
	deadline := time.Now().Add(upgradeWait)
	for time.Now().Before(deadline) {
		if err := notLeaving(logs, old); err != nil {
			return err
		}
		if unix.Kill(old, 0) != nil {
			return fmt.Errorf("the old server %d is gone", old)
		}
		rec, held, err := runnerstate.Running(dir)
		if err == nil && held && rec.PID == old && rec.Ready && ping(sock) == nil {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	rec, held, err := runnerstate.Running(dir)
	return fmt.Errorf("the old server %d did not serve again within %v (holder %d, held %v, ready %v, %v; a ping: %v)",
		old, upgradeWait, rec.PID, held, rec.Ready, err, ping(sock))
}

// leavingError: the old server's Leaving closed.
type leavingError struct {
	pid    int
	reason string
}

func (e leavingError) Error() string {
	return fmt.Sprintf("the old server %d is leaving (its Leaving closed, reason %q) instead of serving on", e.pid, e.reason)
}

// notLeaving fails with a leavingError when the old server's Leaving
// closed: beside killed successors it never should.
func notLeaving(logs string, old int) error {
	data, err := os.ReadFile(filepath.Join(logs, fmt.Sprintf("%d.leaving", old)))
	if err != nil {
		return nil
	}
	_, reason, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	return leavingError{old, reason}
}

// ping sends one request to the echo socket.
func ping(sock string) error {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, err := readLine(c, buf)
	if err == nil && string(buf[:n]) != "pong\n" {
		err = fmt.Errorf("answer %q", buf[:n])
	}
	return err
}

// A successor killed with SIGKILL at a random point before it is ready
// (it never calls Ready), twice BENCH_LINGER_UPGRADES times, beside a
// lingering server (Linger 5 s) and the clients of BenchmarkLinger. Figures:
// the kills after which the old server left instead of serving on
// (old-server-left: the harness then starts its replacement), refused
// connections, failed requests, streams cut, and the time from each other
// kill to the old server's next accept (p50, p99, max); and where the
// kills fell: before the successor's process began, inside its Listen, or
// after Listen returned (it had the sockets).
func BenchmarkLingerKill(b *testing.B) {
	n := lingerUpgrades()
	if n == 0 {
		b.Skipf("set %s=10 to run it (20 successors killed: about half a minute)", envLingerUpgrades)
	}
	var all killRun
	for b.Loop() {
		r := runKills(b, 2*n)
		all.back = append(all.back, r.back...)
		all.failed += r.failed
		all.total += r.total
		all.streams.total += r.streams.total
		all.streams.cut += r.streams.cut
		all.streams.failed += r.streams.failed
		all.early += r.early
		all.inListen += r.inListen
		all.listened += r.listened
		all.left += r.left
		for i, n := range r.byOutcome {
			all.byOutcome[i] += n
		}
	}
	n2 := float64(b.N)
	b.ReportMetric(float64(len(all.back)+all.left)/n2, "kills")
	b.ReportMetric(float64(all.early)/n2, "kills-before-start")
	b.ReportMetric(float64(all.inListen)/n2, "kills-in-listen")
	b.ReportMetric(float64(all.listened)/n2, "kills-after-listen")
	b.ReportMetric(float64(all.left)/n2, "old-server-left")
	b.ReportMetric(float64(all.failed)/n2, "failed")
	b.ReportMetric(float64(all.byOutcome[reqRefused]+all.byOutcome[reqNoSocket])/n2, "refused")
	b.ReportMetric(float64(all.total)/n2, "requests")
	b.ReportMetric(float64(all.streams.total)/n2, "streams")
	b.ReportMetric(float64(all.streams.cut)/n2, "streams-cut")
	b.ReportMetric(float64(all.streams.failed)/n2, "streams-failed")
	b.ReportMetric(quantile(all.back, 0.50), "back-p50-µs")
	b.ReportMetric(quantile(all.back, 0.99), "back-p99-µs")
	b.ReportMetric(quantile(all.back, 1), "back-max-µs")
	b.ReportMetric(0, "ns/op")
}
