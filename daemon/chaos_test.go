//go:build linux

package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
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
// request, then close) while servers hand the directory over to each other
// (a new server takes over, now or drain), are killed with SIGKILL, and are
// started again by the clients' own Dial. Servers write what they do, with
// the machine's monotonic clock, to one O_APPEND witness log; the clients
// count every connect Dial makes (testHookDial) and every answer.
//
// From the log the test proves:
//   - never two servers accepting at once: each server's accepts fall
//     between its admission and its Leaving, and no two servers' spans
//     overlap;
//   - no refused connect (ECONNREFUSED, ENOENT, EAGAIN) except between a
//     kill and the next server's admission (Listen returned): the test's
//     SIGKILL, or the SIGTERM of a takeover's escalation (a drain's Grace
//     is 200 ms, which a loaded machine can outlast before the server has
//     even seen the request and handed its sockets over), which the server
//     writes to the log before it dies of it;
//   - every connection Dial returned was answered by a server that had
//     published Ready before it accepted it, or was dropped with a server
//     killed meanwhile.
//
// RUNNERSTATE_CHAOS sets the duration (default 8s, 3s with -short). The
// figures are logged: go test -race -run '^TestChaos$' -v ./daemon

const envWitness = "RS_DAEMON_WITNESS"

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
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "%d %d "+format+"\n", append([]any{monotonic(), os.Getpid()}, args...)...)
	f.Close()
}

// chaos-server: Listen (its Options in the environment), write "admitted",
// Ready, "ready", then accept and answer "pong <pid>", writing "accept"
// for each connection before it answers; on Leaving write "leaving", Close
// and exit.
func roleChaosServer(dir string) int {
	log := os.Getenv(envWitness)
	opts := Options{Program: "chaos", Version: "v1.0.0", Endpoints: unixEndpoint("d.sock"), Mode: runnerstate.RestartNow}
	if rand.IntN(2) == 0 {
		opts.Mode = runnerstate.RestartDrain
		opts.Grace = 200 * time.Millisecond
	}
	terminated := make(chan os.Signal, 1)
	signal.Notify(terminated, syscall.SIGTERM)
	go func() {
		// Die of SIGTERM as an unprepared server would, once the log says
		// so: its sockets close only after this line is written.
		<-terminated
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
	witness(log, "admitted")
	if err := srv.Ready(nil); err != nil {
		return 1
	}
	witness(log, "ready")
	var inflight sync.WaitGroup
	go func() {
		for {
			c, err := srv.Listeners()[0].Accept()
			if err != nil {
				return
			}
			witness(log, "accept")
			inflight.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					fmt.Fprintf(c, "pong %d\n", os.Getpid())
				}
			})
		}
	}()
	<-srv.Leaving()
	witness(log, "leaving %s", srv.Reason())
	inflight.Wait()
	srv.Close()
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
		cmd.Env = append(os.Environ(), testharness.RoleEnv+"=chaos-server", envWitness+"="+log, "GORACE=atexit_sleep_ms=0")
		return cmd
	}
	var kills []int64
	type spawn struct {
		cmd  *exec.Cmd
		done chan struct{}
	}
	var spawned []spawn
	defer func() {
		// Every server goes, however the test ends.
		Stop(context.Background(), dir, runnerstate.RestartNow)
		for _, s := range spawned {
			s.cmd.Process.Kill()
			<-s.done
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	type outcome struct{ answered, dropped, failed int }
	results := make(chan outcome, 4)
	var clients sync.WaitGroup
	for range 4 {
		clients.Go(func() {
			var o outcome
			defer func() { results <- o }()
			for ctx.Err() == nil {
				dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
				began := monotonic()
				c, _, err := Dial(dctx, dir, serverCmd(), DialOptions{Program: "chaos", Version: "v1.0.0"})
				dcancel()
				if err != nil {
					if !ended(ctx) { // not the test's own end
						o.failed++
						t.Logf("Dial from %d to %d: %v", began, monotonic(), err)
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

	// The chaos: a new server takes over, or the holder is killed.
	rounds := 0
	for ctx.Err() == nil {
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		rec, held, _ := runnerstate.Running(dir)
		switch {
		case held && rec.Ready && rand.IntN(3) == 0:
			kills = append(kills, monotonic())
			syscall.Kill(rec.PID, syscall.SIGKILL)
		default:
			cmd := serverCmd()
			if err := cmd.Start(); err == nil {
				s := spawn{cmd, make(chan struct{})}
				spawned = append(spawned, s)
				go func() { cmd.Wait(); close(s.done) }()
			}
		}
		rounds++
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
	Stop(context.Background(), dir, runnerstate.RestartNow)

	evs := readWitness(t, log)
	defer func() {
		// Whichever check failed, the log says why.
		if t.Failed() || total.failed > 0 {
			for _, e := range evs {
				if e.what != "accept" {
					t.Logf("witness %d %d %s", e.at, e.pid, e.what)
				}
			}
			t.Logf("kills %v", kills)
			t.Logf("refused %v", refused)
		}
	}()
	// Never two servers accepting at once.
	type span struct {
		pid                          int
		admitted, ready, first, last int64
	}
	spans := map[int]*span{}
	order := []int{}
	for _, e := range evs {
		s := spans[e.pid]
		if s == nil {
			s = &span{pid: e.pid}
			spans[e.pid] = s
			order = append(order, e.pid)
		}
		switch {
		case e.what == "admitted":
			s.admitted = e.at
		case e.what == "ready":
			s.ready = e.at
		case e.what == "accept":
			if s.ready == 0 {
				t.Errorf("server %d accepted before it was ready", e.pid)
			}
			if s.first == 0 {
				s.first = e.at
			}
			s.last = e.at
		}
	}
	var accepting []*span
	for _, pid := range order {
		if s := spans[pid]; s.first != 0 {
			accepting = append(accepting, s)
		}
	}
	sort.Slice(accepting, func(i, j int) bool { return accepting[i].first < accepting[j].first })
	for i := 1; i < len(accepting); i++ {
		a, b := accepting[i-1], accepting[i]
		assert.Less(t, a.last, b.first, "servers %d and %d accepted at once", a.pid, b.pid)
		assert.Less(t, a.last, b.admitted, "server %d accepted after %d was admitted", a.pid, b.pid)
	}
	// No refused connect but between a kill (or the start) and the next
	// admission: the test's SIGKILLs, and the SIGTERMs of escalations.
	var admissions []int64
	for _, s := range spans {
		if s.admitted != 0 {
			admissions = append(admissions, s.admitted)
		}
	}
	sort.Slice(admissions, func(i, j int) bool { return admissions[i] < admissions[j] })
	gaps := append([]int64{t0}, kills...)
	var terms []int64
	for _, e := range evs {
		if e.what == "terminated" {
			terms = append(terms, e.at)
		}
	}
	allowed := func(at int64, gaps []int64) bool {
		for _, k := range gaps {
			next := int64(1<<63 - 1)
			for _, a := range admissions {
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
		case allowed(at, terms):
			inTerms++
		default:
			outside++
		}
	}
	assert.Zero(t, outside, "connects refused outside a kill's gap")
	assert.Zero(t, total.failed, "Dials that failed")
	assert.Positive(t, total.answered)
	t.Logf("figures: %v, %d rounds, %d servers admitted, %d killed, %d terminated by an escalation; %d requests answered, %d dropped with a killed server; %d connects, %d refused (%d of them after an escalation's SIGTERM; all in a kill's gap: %d outside)",
		duration, rounds, len(admissions), len(kills), len(terms), total.answered, total.dropped, connects, len(refused), inTerms, outside)
}
