//go:build linux

package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
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
	"golang.org/x/sys/unix"
)

// The daemon's chaos test: for a bounded time, clients loop on Dial (one
// request, then close), stream clients hold a stream open for a while,
// and servers hand the directory over to each other (a new server takes
// over, now or drain; about two in three linger, Options.Linger), are
// killed with SIGKILL (ready holders, and successors before they are
// ready), and are started again by the clients' own Dial. Servers write
// what they do, with the machine's monotonic clock, to one O_APPEND witness
// log (the library's own steps through their Logger: a step-down with its
// deadline, a retake, an older lingering server asked to end now); the
// clients count every connect Dial makes (testHookDial) and every answer,
// and the stream clients record when each stream ended and why.
//
// From the log the test proves:
//   - never two servers accepting at once: a server accepts only once it is
//     ready, never between its step-down and its retake, and never while a
//     server admitted after it is alive (so a lingering server's accepts
//     end at its step-down and its successor's first accept comes after;
//     a server that took the directory back accepts again only once every
//     successor admitted since is gone: killed, or dead of an escalation);
//   - no refused connect (ECONNREFUSED, ENOENT, EAGAIN) except between a
//     kill and the next admission or retake: the test's SIGKILL, or the
//     SIGTERM of a takeover's escalation (a drain's Grace is 200 ms, which
//     a loaded machine can outlast before the server has even seen the
//     request and handed its sockets over, and which a server that does
//     not linger outlasts whenever a stream is open), which the server
//     writes to the log before it dies of it;
//   - no stream cut without a reason: a stream ends when its client ends
//     it, unless its server was killed, left with RestartNow, or stepped
//     down to linger and then reached its deadline or was asked by a newer
//     lingering server to end now; so no stream on a lingering server is
//     cut before its deadline;
//   - at most one lingering server at any time: the spans from a step-down
//     (linger.json's since) to that server's Close, retake or death never
//     overlap;
//   - every connection Dial returned was answered by a server that had
//     published Ready before it accepted it, or was dropped with a server
//     killed meanwhile.
//
// RUNNERSTATE_CHAOS sets the duration (default 8s, 3s with -short);
// RUNNERSTATE_CHAOS_WITNESS=1 logs the witness log even when the test
// passes. The figures are logged: go test -race -run '^TestChaos$' -v ./daemon

const (
	envWitness   = "RS_DAEMON_WITNESS"
	envSlowStart = "RS_DAEMON_SLOW_START" // "1": publish Ready after a random delay of up to 300 ms
	envChaosEnd  = "RS_DAEMON_CHAOS_END"  // the monotonic time past which a server exits, whatever it does
)

func init() {
	roles["chaos-server"] = roleChaosServer
}

// monotonic is the machine's monotonic clock, comparable across processes.
func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// witness appends one line to the witness log.
func witness(path, format string, args ...any) {
	witnessAt(path, monotonic(), format, args...)
}

// witnessAt appends one line to the witness log, dated at.
func witnessAt(path string, at int64, format string, args ...any) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "%d %d "+format+"\n", append([]any{at, os.Getpid()}, args...)...)
	f.Close()
}

// witnessHandler writes the library's steps of a lingering step-down to
// the witness log: "stepdown since=<t> deadline=<t>" (the deadline from
// the log's until, since = deadline - Linger), "retaken", "endnow" (a
// newer server asked it to end now) and "killlingering <pid>" (a newer
// server's kill after LingerGrace, or a reap past kill_at); the rest
// of package daemon's messages as "lib <message> <attributes>", which the
// checks ignore (they say what happened when one fails).
type witnessHandler struct {
	path   string
	linger time.Duration
	srv    atomic.Pointer[Server] // once Listen returned
	asked  atomic.Bool            // the library said it is leaving
}

// stuck writes the goroutines of a server whose library said it is
// leaving but whose Leaving has not closed, and says so in the log.
func (h *witnessHandler) stuck(when string) {
	srv := h.srv.Load()
	if !h.asked.Load() || srv == nil || isClosed(srv.Leaving()) {
		return
	}
	stacks := fmt.Sprintf("%s.stacks-%d", h.path, os.Getpid())
	if f, err := os.Create(stacks); err == nil {
		pprof.Lookup("goroutine").WriteTo(f, 2)
		f.Close()
	}
	witness(h.path, "stuck Leaving not closed %s after the library's leaving: %s", when, stacks)
}

func (h *witnessHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *witnessHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *witnessHandler) WithGroup(string) slog.Handler            { return h }

func (h *witnessHandler) Handle(_ context.Context, r slog.Record) error {
	attr := func(key string) slog.Value {
		var v slog.Value
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v = a.Value
			}
			return true
		})
		return v
	}
	switch r.Message {
	case "daemon: stepped down to linger":
		// until is a wall clock time (slog keeps no monotonic reading):
		// its distance from now, added to the monotonic clock's now.
		now := monotonic()
		deadline := now + int64(time.Until(attr("until").Time()))
		witnessAt(h.path, now, "stepdown since=%d deadline=%d", deadline-int64(h.linger), deadline)
	case "daemon: leaving":
		// Leaving closes right after this line: a server whose Leaving
		// has not closed 2 s later, or when an escalation's SIGTERM
		// comes, writes "stuck" and its goroutines.
		h.asked.Store(true)
		time.AfterFunc(2*time.Second, func() { h.stuck("2 s") })
		witness(h.path, "lib daemon: leaving reason=%v", attr("reason"))
	case "daemon: the successor failed before it was ready: took the directory back":
		witness(h.path, "retaken")
	case "daemon: a newer server asked this lingering one to end now":
		witness(h.path, "endnow")
	case "daemon: the older lingering server outlived its grace: killing it",
		"runnerstate: killed a lingering server that outlived its kill_at":
		witness(h.path, "killlingering %d", attr("pid").Int64())
	default:
		if strings.HasPrefix(r.Message, "daemon: ") {
			var b strings.Builder
			r.Attrs(func(a slog.Attr) bool {
				if a.Key != "dir" {
					fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
				}
				return true
			})
			witness(h.path, "lib %s%s", strings.ReplaceAll(r.Message, "\n", " "), strings.ReplaceAll(b.String(), "\n", " "))
		}
	}
	return nil
}

// chaos-server: Listen (its Options drawn at random: drain three times in
// four, else now; Linger two times in three), write "admitted", publish Ready (with
// envSlowStart, after a random delay: a start that takes time, which the
// chaos may kill first), write "ready", then accept, writing "accept" the moment each Accept returns.
// A connection's first line "ping" is answered "pong <pid>"; "stream"
// starts "tick <pid> <n>" lines every 20 ms until the client goes. On
// Leaving write "leaving <reason>", cut the streams if the reason is now,
// wait for Idle, write "idle", Close, write "closed" and exit.
func roleChaosServer(dir string) int {
	log := os.Getenv(envWitness)
	// A server left when the test ends (a copy a Dial started, admitted
	// after the test's last Stop) goes by itself, well after the test.
	if end, err := strconv.ParseInt(os.Getenv(envChaosEnd), 10, 64); err == nil {
		time.AfterFunc(time.Duration(end-monotonic()), func() { os.Exit(0) })
	}
	opts := Options{Program: "chaos", Version: "v1.0.0", Endpoints: unixEndpoint("d.sock"), Mode: runnerstate.RestartNow}
	if rand.IntN(4) != 0 {
		opts.Mode = runnerstate.RestartDrain
		opts.Grace = 200 * time.Millisecond
	}
	if rand.IntN(3) != 0 {
		opts.Linger = time.Duration(300+rand.IntN(1200)) * time.Millisecond
		opts.LingerGrace = 500 * time.Millisecond
	}
	wh := &witnessHandler{path: log, linger: opts.Linger}
	opts.Logger = slog.New(wh)
	runnerstate.SetLogger(opts.Logger) // an admission's reap of a lingering server past its kill_at
	terminated := make(chan os.Signal, 1)
	signal.Notify(terminated, syscall.SIGTERM)
	go func() {
		// Die of SIGTERM as an unprepared server would, once the log says
		// so: its sockets close only after this line is written.
		<-terminated
		wh.stuck("at SIGTERM")
		witness(log, "terminated")
		signal.Reset(syscall.SIGTERM)
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	srv, err := Listen(ctx, dir, opts)
	cancel()
	if err != nil {
		witness(log, "refused %v", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	wh.srv.Store(srv)
	witness(log, "admitted linger=%d", opts.Linger.Milliseconds())
	if os.Getenv(envSlowStart) == "1" {
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond) // its start's work, not a synchronisation
	}
	if err := srv.Ready(nil); err != nil {
		return 1
	}
	witness(log, "ready")
	var mu sync.Mutex
	streams := map[net.Conn]bool{}
	go func() {
		for {
			c, err := srv.Listeners()[0].Accept()
			at := monotonic()
			if err != nil {
				return
			}
			witnessAt(log, at, "accept")
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				line, err := bufio.NewReader(c).ReadString('\n')
				switch {
				case err != nil:
				case line == "stream\n":
					mu.Lock()
					streams[c] = true
					mu.Unlock()
					defer func() {
						mu.Lock()
						delete(streams, c)
						mu.Unlock()
					}()
					c.SetDeadline(time.Time{})
					for n := 0; ; n++ {
						c.SetWriteDeadline(time.Now().Add(5 * time.Second))
						if _, err := fmt.Fprintf(c, "tick %d %d\n", os.Getpid(), n); err != nil {
							return
						}
						time.Sleep(20 * time.Millisecond) // the stream's pace, not a synchronisation
					}
				default:
					fmt.Fprintf(c, "pong %d\n", os.Getpid())
				}
			}()
		}
	}()
	<-srv.Leaving()
	why := srv.Reason()
	witness(log, "leaving %s", why)
	if why == runnerstate.RestartNow || why == runnerstate.RestartLost {
		mu.Lock()
		for c := range streams {
			c.Close()
		}
		mu.Unlock()
	}
	<-srv.Idle()
	witness(log, "idle")
	srv.Close()
	witness(log, "closed")
	return 0
}

// event is one witness line.
type event struct {
	at   int64
	pid  int
	what string
}

func readWitness(t *testing.T, path string) []event {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var evs []event
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) < 3 {
			continue
		}
		at, _ := strconv.ParseInt(f[0], 10, 64)
		pid, _ := strconv.Atoi(f[1])
		evs = append(evs, event{at, pid, f[2]})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	return evs
}

// streamEnd is how one stream client's stream went: on which server,
// when it began and ended (the monotonic clock), and whether the client
// ended it or it was cut (the error that ended it).
type streamEnd struct {
	pid        int
	began, end int64
	cut        error
	ticks      int
}

// kill is one of the test's SIGKILLs: when (just before the signal),
// whom, and whether its record said ready.
type kill struct {
	at    int64
	pid   int
	ready bool
}

func TestChaos(t *testing.T) {
	duration := 8 * time.Second
	if testing.Short() {
		duration = 3 * time.Second
	}
	if s := os.Getenv("RUNNERSTATE_CHAOS"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "RUNNERSTATE_CHAOS")
		duration = d
	}
	dir := shortDir(t)
	log := filepath.Join(t.TempDir(), "witness")
	t0 := monotonic()

	// The clients' connects, as Dial makes them.
	var mu sync.Mutex
	var refused []int64
	var connects int
	testHookDial.Store(new(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		connects++
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EAGAIN) {
			refused = append(refused, monotonic())
		}
	}))
	defer testHookDial.Store(nil)

	serverCmd := func() *exec.Cmd {
		cmd := testharness.Command(dir)
		cmd.Env = append(os.Environ(), testharness.RoleEnv+"=chaos-server", envWitness+"="+log, "GORACE=atexit_sleep_ms=0",
			envChaosEnd+"="+strconv.FormatInt(t0+int64(duration+30*time.Second), 10))
		return cmd
	}
	var kills []kill
	type spawn struct {
		cmd  *exec.Cmd
		done chan struct{}
	}
	var spawned []spawn
	defer func() {
		// Every server goes, however the test ends (one left, which a
		// Stop may miss, by its own bound: envChaosEnd).
		ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
		defer cancel()
		if err := Stop(ctx, dir, runnerstate.RestartNow); err != nil {
			t.Errorf("the last server asked to stop as the test ends: %v", err)
		}
		for _, s := range spawned {
			s.cmd.Process.Kill()
			<-s.done
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	dial := func() (net.Conn, error) {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		defer dcancel()
		began := monotonic()
		c, _, err := Dial(dctx, dir, serverCmd(), DialOptions{Program: "chaos", Version: "v1.0.0"})
		if err != nil && !ended(ctx) { // not the test's own end
			t.Logf("Dial from %d to %d: %v", began, monotonic(), err)
		}
		return c, err
	}
	type outcome struct{ answered, dropped, failed int }
	results := make(chan outcome, 6)
	var clients sync.WaitGroup
	for range 4 {
		clients.Go(func() {
			var o outcome
			defer func() { results <- o }()
			for ctx.Err() == nil {
				c, err := dial()
				if err != nil {
					if !ended(ctx) {
						o.failed++
					}
					continue
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				_, err = fmt.Fprintln(c, "ping")
				var line string
				if err == nil {
					line, err = bufio.NewReader(c).ReadString('\n')
				}
				c.Close()
				if err != nil || !strings.HasPrefix(line, "pong ") {
					o.dropped++ // its server was killed with it in the backlog
					continue
				}
				o.answered++
			}
		})
	}
	// The stream clients: each holds a stream for 0.3 to 2 s, then ends it
	// and opens the next.
	var smu sync.Mutex
	var streams []streamEnd
	for range 2 {
		clients.Go(func() {
			var o outcome
			defer func() { results <- o }()
			for ctx.Err() == nil {
				c, err := dial()
				if err != nil {
					if !ended(ctx) {
						o.failed++
					}
					continue
				}
				s, ok := holdStream(ctx, c, time.Duration(300+rand.IntN(1700))*time.Millisecond)
				c.Close()
				if !ok {
					o.dropped++ // no tick: its server was killed with it in the backlog
					continue
				}
				o.answered++
				smu.Lock()
				streams = append(streams, s)
				smu.Unlock()
			}
		})
	}

	// The chaos: the ready holder is killed, or a new server takes over,
	// slow to get ready, and one in three of those is killed once
	// admitted, before it is ready, when its predecessor lingers (which
	// then takes the directory back). Not when none lingers: the copies
	// a Dial starts step aside for such a successor, and a Dial whose
	// three copies did so for successors killed in turn rightly gives up
	// (Dial's doc). The servers Dial starts are ready at once, as a
	// copy killed before it is ready fails its Dial.
	rounds := 0
	for ctx.Err() == nil {
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		rounds++
		rec, held, _ := runnerstate.Running(dir)
		if held && rec.Ready && rand.IntN(3) == 0 {
			kills = append(kills, kill{monotonic(), rec.PID, true})
			syscall.Kill(rec.PID, syscall.SIGKILL)
			continue
		}
		cmd := serverCmd()
		cmd.Env = append(cmd.Env, envSlowStart+"=1")
		if err := cmd.Start(); err != nil {
			continue
		}
		s := spawn{cmd, make(chan struct{})}
		spawned = append(spawned, s)
		go func() { cmd.Wait(); close(s.done) }()
		if rand.IntN(3) != 0 {
			continue
		}
		// Its admission is awaited at most 2 s (a drain of a server that
		// does not linger lasts up to its escalation), polling.
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(time.Millisecond) {
			rec, held, _ := runnerstate.Running(dir)
			if held && rec.PID == cmd.Process.Pid {
				if l, ok, _ := runnerstate.ReadLingering(dir); ok && !l.Retaking && !rec.Ready && rec.Leaving == "" {
					kills = append(kills, kill{monotonic(), rec.PID, false})
					syscall.Kill(rec.PID, syscall.SIGKILL)
				}
				break
			}
			if isClosed(s.done) {
				break
			}
		}
	}
	clients.Wait()
	close(results)
	var total outcome
	for o := range results {
		total.answered += o.answered
		total.dropped += o.dropped
		total.failed += o.failed
	}
	testHookDial.Store(nil)
	stopCtx, stopCancel := context.WithTimeout(context.Background(), testharness.Wait)
	defer stopCancel()
	if err := Stop(stopCtx, dir, runnerstate.RestartNow); err != nil {
		t.Errorf("the last server asked to stop: %v", err)
	}
	// The servers still lingering end once their streams have: the log
	// is whole when none is left.
	testharness.Eventually(t, "no server lingering", func() bool {
		_, ok, err := runnerstate.ReadLingering(dir)
		return err == nil && !ok
	})

	evs := readWitness(t, log)
	defer func() {
		// Whichever check failed, the log says why.
		if t.Failed() || total.failed > 0 || os.Getenv("RUNNERSTATE_CHAOS_WITNESS") == "1" {
			for _, e := range evs {
				if e.what != "accept" {
					t.Logf("witness %d %d %s", e.at, e.pid, e.what)
				}
			}
			t.Logf("kills %v", kills)
			t.Logf("refused %v", refused)
			for _, s := range streams {
				t.Logf("stream %+v", s)
			}
		}
	}()
	c := checkChaos(t, evs, kills, streams)

	// No refused connect but between a kill (or the start) and the next
	// admission or retake: the test's SIGKILLs, and the SIGTERMs of
	// escalations.
	sort.Slice(c.admissions, func(i, j int) bool { return c.admissions[i] < c.admissions[j] })
	gaps := []int64{t0}
	for _, k := range kills {
		gaps = append(gaps, k.at)
	}
	allowed := func(at int64, gaps []int64) bool {
		for _, k := range gaps {
			next := int64(1<<63 - 1)
			for _, a := range c.admissions {
				if a > k {
					next = a
					break
				}
			}
			if at >= k && at <= next {
				return true
			}
		}
		return false
	}
	outside, inTerms := 0, 0
	for _, at := range refused {
		switch {
		case allowed(at, gaps):
		case allowed(at, c.terms):
			inTerms++
		default:
			outside++
		}
	}
	assert.Zero(t, outside, "connects refused outside a kill's gap")
	assert.Zero(t, total.failed, "Dials that failed")
	assert.Positive(t, total.answered)
	beforeReady := 0
	for _, k := range kills {
		if !k.ready {
			beforeReady++
		}
	}
	t.Logf("figures: %v, %d rounds, %d servers admitted (%d with Linger), %d killed (%d before Ready), %d terminated by an escalation; %d requests and streams answered, %d dropped with a killed server; %d connects, %d refused (%d of them after an escalation's SIGTERM; all in a kill's gap: %d outside)",
		duration, rounds, c.admitted, c.lingerers, len(kills), beforeReady, len(c.terms), total.answered, total.dropped, connects, len(refused), inTerms, outside)
	t.Logf("figures: %d step-downs to linger, %d retakes, %d older lingering servers asked to end now; %d streams: %d kept through their server's step-down, %d cut at a deadline, %d cut by an end now, %d cut with their server killed or leaving now; %d cut without a reason",
		c.stepdowns, c.retakes, c.endnows, len(streams), c.kept, c.atDeadline, c.byEndNow, c.withKill, c.unexplained)
}

// holdStream starts a stream on c and reads its ticks until hold has
// passed (or ctx ended), then ends it; false when no tick came.
func holdStream(ctx context.Context, c net.Conn, hold time.Duration) (streamEnd, bool) {
	var s streamEnd
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(c, "stream"); err != nil {
		return s, false
	}
	rd := bufio.NewReader(c)
	until := time.Now().Add(hold)
	for {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := rd.ReadString('\n')
		at := monotonic()
		if err != nil {
			if s.ticks == 0 {
				return s, false
			}
			s.end, s.cut = at, err
			return s, true
		}
		f := strings.Fields(line)
		pid := 0
		if len(f) == 3 && f[0] == "tick" {
			pid, _ = strconv.Atoi(f[1])
		}
		if s.ticks == 0 {
			s.pid, s.began = pid, at
		} else if pid != s.pid {
			s.end, s.cut = at, fmt.Errorf("a tick from %d on a stream of %d: %q", pid, s.pid, line)
			return s, true
		}
		s.ticks++
		if time.Now().After(until) || ctx.Err() != nil {
			s.end = monotonic()
			return s, true
		}
	}
}

// chaosFacts is what checkChaos found in the witness log.
type chaosFacts struct {
	admissions, terms                                 []int64 // admissions and retakes; escalations' SIGTERMs
	admitted, lingerers                               int
	stepdowns, retakes, endnows                       int
	kept, atDeadline, byEndNow, withKill, unexplained int
}

// chaosServer is one server's life, from the witness log.
type chaosServer struct {
	pid             int
	admitted, ready int64
	killed          int64 // by the test or a newer lingering server, or terminated by an escalation; 0: never
	idle            int64 // Idle closed: Leaving closed and no connection open (a lingering server's end); 0: never
	closed          int64 // its Close returned; 0: never
	leavingNow      int64 // left with RestartNow or RestartLost
	endnow          int64
	steps           []lingerSpan
}

// lingerSpan is one step-down: since (linger.json's), the deadline, and
// when it ended (retake, close, death); 0 while it lasts.
type lingerSpan struct {
	since, deadline, retaken int64
}

// checkChaos proves from the witness log, the test's kills and the
// streams' ends: never two servers accepting at once, no stream cut
// without a reason, at most one lingering server at a time.
func checkChaos(t *testing.T, evs []event, kills []kill, streams []streamEnd) chaosFacts {
	var f chaosFacts
	servers := map[int]*chaosServer{}
	var order []*chaosServer
	get := func(pid int) *chaosServer {
		s := servers[pid]
		if s == nil {
			s = &chaosServer{pid: pid}
			servers[pid] = s
			order = append(order, s)
		}
		return s
	}
	var deaths []int64 // the test's kills, escalations' SIGTERMs, lingering servers killed
	killedAt := func(s *chaosServer, at int64) {
		if s.killed == 0 || at < s.killed {
			s.killed = at
		}
		deaths = append(deaths, at)
	}
	for _, k := range kills {
		killedAt(get(k.pid), k.at)
	}
	var accepts []event
	for _, e := range evs {
		s := get(e.pid)
		what, arg, _ := strings.Cut(e.what, " ")
		switch what {
		case "admitted":
			s.admitted = e.at
			f.admissions = append(f.admissions, e.at)
			f.admitted++
			if arg != "linger=0" {
				f.lingerers++
			}
		case "ready":
			s.ready = e.at
		case "accept":
			accepts = append(accepts, e)
		case "terminated":
			f.terms = append(f.terms, e.at)
			killedAt(s, e.at)
		case "idle":
			s.idle = e.at
		case "closed":
			s.closed = e.at
		case "leaving":
			if arg == runnerstate.RestartNow || arg == runnerstate.RestartLost {
				s.leavingNow = e.at
			}
		case "stepdown":
			var since, deadline int64
			if _, err := fmt.Sscanf(arg, "since=%d deadline=%d", &since, &deadline); err != nil {
				t.Errorf("witness line %q: %v", e.what, err)
			}
			s.steps = append(s.steps, lingerSpan{since: since, deadline: deadline})
			f.stepdowns++
		case "retaken":
			if n := len(s.steps); n == 0 || s.steps[n-1].retaken != 0 {
				t.Errorf("server %d took the directory back at %d with no step-down before", e.pid, e.at)
			} else {
				s.steps[n-1].retaken = e.at
			}
			f.admissions = append(f.admissions, e.at)
			f.retakes++
		case "endnow":
			if s.endnow == 0 {
				s.endnow = e.at
			}
			f.endnows++
		case "stuck":
			t.Errorf("server %d: %s", e.pid, arg)
			if stacks := arg[strings.LastIndexByte(arg, ' ')+1:]; stacks != "" {
				if data, err := os.ReadFile(stacks); err == nil {
					t.Logf("goroutines of server %d:\n%s", e.pid, data)
				}
			}
		case "killlingering":
			pid, _ := strconv.Atoi(arg)
			killedAt(get(pid), e.at)
		}
	}

	// Never two servers accepting at once.
	for _, e := range accepts {
		s := servers[e.pid]
		if s.ready == 0 || e.at < s.ready {
			t.Errorf("server %d accepted at %d before it was ready", e.pid, e.at)
		}
		for _, st := range s.steps {
			// Between its step-down and its retake (logged just after it
			// accepts again) it accepts only once a successor died.
			if e.at > st.since && (st.retaken == 0 || e.at < st.retaken) && !slices.ContainsFunc(deaths, func(d int64) bool { return d > st.since && d < e.at }) {
				t.Errorf("server %d accepted at %d after it stepped down at %d, no successor dead since (taken back: %d)", e.pid, e.at, st.since, st.retaken)
			}
		}
		for _, o := range order {
			if o != s && o.admitted > s.admitted && o.admitted < e.at && (o.gone() == 0 || o.gone() > e.at) {
				t.Errorf("server %d accepted at %d while server %d, admitted after it at %d, was alive (gone: %d)", e.pid, e.at, o.pid, o.admitted, o.gone())
			}
		}
	}

	// At most one lingering server at any time: a lingering span ends at
	// the retake, or when the server has nothing left to serve (Idle, then
	// Close removes linger.json), or its death.
	type span struct {
		pid        int
		begin, end int64
	}
	var spans []span
	for _, s := range order {
		for _, st := range s.steps {
			end := st.retaken
			if end == 0 {
				end = s.gone()
				if s.idle > st.since && (end == 0 || s.idle < end) {
					end = s.idle
				}
			}
			if end == 0 {
				end = int64(1<<63 - 1)
			}
			spans = append(spans, span{s.pid, st.since, end})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].begin < spans[j].begin })
	for i := 1; i < len(spans); i++ {
		a, b := spans[i-1], spans[i]
		if b.begin < a.end {
			t.Errorf("two servers lingering at once: %d from %d to %d, %d from %d", a.pid, a.begin, a.end, b.pid, b.begin)
		}
	}

	// No stream cut without a reason.
	for _, st := range streams {
		s := servers[st.pid]
		if s == nil {
			t.Errorf("a stream from %d, a server the log does not know", st.pid)
			continue
		}
		// The step-down in effect when the stream ended: since before,
		// not yet taken back (a server whose deadline passed before its
		// successor was ready cuts what it holds, and may take the
		// directory back after).
		var stepped *lingerSpan
		for i := range s.steps {
			if sp := &s.steps[i]; sp.since < st.end && (sp.retaken == 0 || sp.retaken > st.end) {
				stepped = sp
			}
		}
		if st.cut == nil {
			if stepped != nil {
				f.kept++
			}
			continue
		}
		before := func(at int64) bool { return at != 0 && at <= st.end }
		switch {
		case before(s.killed), before(s.leavingNow):
			f.withKill++
		case stepped != nil && st.end >= stepped.deadline-int64(time.Millisecond):
			// The deadline is linger.json's wall clock time made
			// monotonic: 1 ms for the conversion.
			f.atDeadline++
		case stepped != nil && before(s.endnow):
			f.byEndNow++
		default:
			f.unexplained++
			t.Errorf("a stream on server %d (from %d) was cut at %d without a reason (step-down %+v): %v", st.pid, st.began, st.end, stepped, st.cut)
		}
	}
	return f
}

// gone is when s was killed or closed, whichever came first; 0: never.
func (s *chaosServer) gone() int64 {
	if s.killed != 0 && (s.closed == 0 || s.killed < s.closed) {
		return s.killed
	}
	return s.closed
}
