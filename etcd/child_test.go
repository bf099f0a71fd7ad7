//go:build linux

package etcd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
)

// mono is the machine's monotonic clock in nanoseconds: the same clock in
// every process, so that events of different processes can be ordered.
func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// event is one line a child prints.
type event struct {
	Ev    string `json:"ev"`
	Mono  int64  `json:"mono"`
	PID   int    `json:"pid"`
	Token int64  `json:"token,omitempty"`
	Mode  string `json:"mode,omitempty"`
	Why   string `json:"why,omitempty"`
	Err   string `json:"err,omitempty"`
	Msg   string `json:"msg,omitempty"`
	N     int64  `json:"n,omitempty"`
	At    int64  `json:"at,omitempty"` // lost: the leadership's last safe deadline, on mono's clock
	OK    bool   `json:"ok,omitempty"`
	Rev   int64  `json:"rev,omitempty"`
}

// spec is what a child runner does; it travels in the environment.
type spec struct {
	Endpoint  string        `json:"endpoint"`
	Key       string        `json:"key"`
	How       string        `json:"how"` // "campaign" or "takeover"
	Mode      string        `json:"mode,omitempty"`
	Grace     time.Duration `json:"grace,omitempty"`
	KillAfter time.Duration `json:"kill_after,omitempty"`
	NoForce   bool          `json:"no_force,omitempty"`
	Obey      bool          `json:"obey,omitempty"`    // release on a restart request
	Loop      bool          `json:"loop,omitempty"`    // campaign again after each leadership
	Witness   time.Duration `json:"witness,omitempty"` // fenced writes this often while leading
	Linger    time.Duration `json:"linger,omitempty"`  // keep working this long after Lost
	Dir       string        `json:"dir,omitempty"`
	Checks    time.Duration `json:"checks,omitempty"`    // call Valid this often while leading
	TTL       time.Duration `json:"ttl,omitempty"`       // default testTTL
	Careful   bool          `json:"careful,omitempty"`   // witness: Valid before each write, each bounded by carefulTimeout
	LocalLog  string        `json:"local_log,omitempty"` // witness: append each action to this file, unfenced
	Publish   time.Duration `json:"publish,omitempty"`   // Publish this often while leading
}

// carefulTimeout bounds a careful witness write: as the package's docs tell
// users to bound their own Txns, so that one stuck on a frozen member is
// given up and the next goes to another.
const carefulTimeout = 300 * time.Millisecond

const specEnv = "RUNNERSTATE_ETCD_SPEC"

func runRole(role string) int {
	switch role {
	case "runner":
		var s spec
		if err := json.Unmarshal([]byte(os.Getenv(specEnv)), &s); err != nil {
			fmt.Fprintln(os.Stderr, "bad spec:", err)
			return 2
		}
		return runner(s)
	case "member":
		return memberRole()
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}

var stdoutMu sync.Mutex

// emit prints one event line, stamped with the monotonic clock.
func emit(e event) {
	e.Mono, e.PID = mono(), os.Getpid()
	data, _ := json.Marshal(e)
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	_, _ = os.Stdout.Write(append(data, '\n'))
}

// eventHandler turns the package's log lines into events ("log").
type eventHandler struct{}

func (eventHandler) Enabled(context.Context, slog.Level) bool { return true }
func (eventHandler) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	emit(event{Ev: "log", Msg: msg})
	return nil
}
func (h eventHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h eventHandler) WithGroup(string) slog.Handler      { return h }

// runner is a child that campaigns or takes over, reports what happens, and
// obeys its stdin: "release" lets go; EOF lets go and exits.
func runner(s spec) int {
	cli, err := newClient(s.Endpoint)
	if err != nil {
		emit(event{Ev: "error", Err: err.Error()})
		return 1
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "release" {
				release <- struct{}{}
			}
		}
		cancel()
	}()
	ttl := testTTL
	if s.TTL > 0 {
		ttl = s.TTL
	}
	o := Options{TTL: ttl, Mode: s.Mode, Grace: s.Grace, KillAfter: s.KillAfter, NoForce: s.NoForce, Dir: s.Dir,
		Logger: slog.New(eventHandler{})}
	for {
		emit(event{Ev: "start"})
		var l *Leadership
		if s.How == "takeover" {
			l, err = Takeover(ctx, cli, s.Key, o)
		} else {
			l, err = Campaign(ctx, cli, s.Key, o)
		}
		if err != nil {
			ev := event{Ev: "error", Err: err.Error()}
			if errors.Is(err, ErrSuperseded) {
				ev.Ev = "superseded"
			}
			emit(ev)
			if ctx.Err() != nil || !s.Loop {
				return 0
			}
			continue
		}
		emit(event{Ev: "admitted", Token: l.Token()})
		lead(ctx, cli, l, s, release)
		emit(event{Ev: "released", Token: l.Token()})
		if ctx.Err() != nil || !s.Loop {
			return 0
		}
	}
}

// lead is one leadership: witness writes, restart requests, loss.
func lead(ctx context.Context, cli *clientv3.Client, l *Leadership, s spec, release <-chan struct{}) {
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() {
		close(stop)
		wg.Wait()
		emit(event{Ev: "releasing", Token: l.Token()}) // the work has stopped
		l.Release()
	}()
	if s.Witness > 0 {
		wg.Add(1)
		go witness(cli, l, s, stop, &wg)
	}
	if s.Checks > 0 {
		wg.Add(1)
		go checks(l, s.Checks, stop, &wg)
	}
	if s.Publish > 0 {
		wg.Add(1)
		go publishes(l, s.Publish, stop, &wg)
	}
	restart := l.Restart()
	for {
		select {
		case <-ctx.Done():
			return
		case <-release:
			return
		case mode, ok := <-restart:
			if !ok {
				restart = nil
				continue
			}
			emit(event{Ev: "restart", Mode: mode, Token: l.Token()})
			if s.Obey {
				return
			}
		case <-l.Lost():
			emit(event{Ev: "lost", Token: l.Token(), Why: l.Err().Error(), At: deadlineMono(l)})
			if s.Linger > 0 {
				t := time.NewTimer(s.Linger)
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
			}
			return
		}
	}
}

// checks calls Valid every d while leading, as work that checks before each
// action does, and reports the first false: N is when the last check that
// answered true began, Rev when the first false one began (mono's clock).
func checks(l *Leadership, d time.Duration, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(d)
	defer tick.Stop()
	var lastTrue int64
	for stopped := false; ; {
		began := mono()
		if !l.Valid() {
			emit(event{Ev: "invalid", Token: l.Token(), N: lastTrue, Rev: began})
			return
		}
		lastTrue = began
		if stopped {
			return
		}
		select {
		case <-stop: // one check more: the work may stop on Lost first
			stopped = true
		case <-tick.C:
		}
	}
}

// publishes calls Publish every d while leading and reports each answer:
// Rev is when the call began.
func publishes(l *Leadership, d time.Duration, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		began := mono()
		err := l.Publish(ctx, runnerstate.Record{})
		cancel()
		ev := event{Ev: "published", Token: l.Token(), Rev: began, OK: err == nil}
		if err != nil {
			ev.Err = err.Error()
		}
		emit(ev)
		if errors.Is(err, runnerstate.ErrNotHolder) {
			return
		}
	}
}

// deadlineMono is l's safe deadline now, converted to mono's clock.
func deadlineMono(l *Leadership) int64 {
	l.ls.mu.Lock()
	d := l.ls.deadline
	l.ls.mu.Unlock()
	return d - (now() - mono())
}

// witness makes a fenced write every s.Witness, without looking at Lost (as
// work that does not check does), and reports each answer: the witness log.
func witness(cli *clientv3.Client, l *Leadership, s spec, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(s.Witness)
	defer tick.Stop()
	key := s.Key + "/witness"
	var inflight sync.WaitGroup
	defer inflight.Wait()
	var local *os.File
	if s.LocalLog != "" {
		var err error
		if local, err = os.OpenFile(s.LocalLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
			emit(event{Ev: "error", Err: err.Error()})
			return
		}
		defer func() { _ = local.Close() }()
	}
	for n := int64(1); ; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		sent := mono()
		if s.Careful && !l.Valid() {
			continue // the check before each action
		}
		if local != nil {
			// The unfenced action: one append, in one write.
			_, _ = fmt.Fprintf(local, "%d %d %d %d\n", os.Getpid(), l.Token(), n, sent)
		}
		inflight.Add(1)
		go func(n int64) {
			defer inflight.Done()
			bound := wait
			if s.Careful {
				bound = carefulTimeout
			}
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			resp, err := cli.Txn(ctx).If(l.Fence()).Then(clientv3.OpPut(key, strconv.FormatInt(l.Token(), 10)+" "+strconv.FormatInt(n, 10))).Commit()
			ev := event{Ev: "write", Token: l.Token(), N: n, Rev: sent}
			if err != nil {
				ev.Err = err.Error()
			} else {
				ev.OK = resp.Succeeded
			}
			emit(ev)
		}(n)
	}
}

// child is a re-executed test binary running a runner.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	write func(string)

	mu      sync.Mutex
	events  []event
	changed chan struct{} // closed and replaced at each new event
	exited  chan struct{} // closed when stdout ends
	cursor  int
	once    sync.Once
}

// startRunner starts a runner child for s; it is killed and reaped when the
// test ends, whatever happened.
func startRunner(t testing.TB, s spec) *child { return startRunnerTo(t, s, nil) }

// startRunnerTo is startRunner that also sends the child's admitted, lost
// and released events to sink (buffered by the caller, large enough).
func startRunnerTo(t testing.TB, s spec, sink chan<- event) *child {
	t.Helper()
	data, err := json.Marshal(s)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=runner", specEnv+"="+string(data), "GORACE=atexit_sleep_ms=0")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{t: t, cmd: cmd, stdin: stdin, changed: make(chan struct{}), exited: make(chan struct{})}
	c.write = func(line string) { _, _ = stdin.Write([]byte(line + "\n")) }
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			if sink != nil && (e.Ev == "admitted" || e.Ev == "lost" || e.Ev == "released") {
				sink <- e
			}
			c.mu.Lock()
			c.events = append(c.events, e)
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
	}()
	t.Cleanup(c.kill)
	return c
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// next waits for the child's next event named one of evs, skipping others,
// and fails the test after wait.
func (c *child) next(evs ...string) event {
	c.t.Helper()
	e, ok := c.nextWithin(wait, evs...)
	if !ok {
		c.t.Fatalf("child %d: no %v within %v; events: %+v", c.pid(), evs, wait, c.all())
	}
	return e
}

// nextWithin is next with a bound of its own; false when it passed or the
// child ended first.
func (c *child) nextWithin(d time.Duration, evs ...string) (event, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		for c.cursor < len(c.events) {
			e := c.events[c.cursor]
			c.cursor++
			for _, name := range evs {
				if e.Ev == name {
					c.mu.Unlock()
					return e, true
				}
			}
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-c.exited:
			c.mu.Lock()
			more := c.cursor < len(c.events)
			c.mu.Unlock()
			if !more {
				return event{}, false
			}
		case <-deadline.C:
			return event{}, false
		}
	}
}

// find waits for an event, among all the child printed, that ok accepts,
// and fails the test after wait.
func (c *child) find(ok func(event) bool) event {
	c.t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	seen := 0
	for {
		c.mu.Lock()
		for ; seen < len(c.events); seen++ {
			if ok(c.events[seen]) {
				e := c.events[seen]
				c.mu.Unlock()
				return e
			}
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-c.exited:
			c.t.Fatalf("child %d ended without the event; events: %+v", c.pid(), c.all())
		case <-deadline.C:
			c.t.Fatalf("child %d: no such event within %v; events: %+v", c.pid(), wait, c.all())
		}
	}
}

// all is every event so far.
func (c *child) all() []event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]event(nil), c.events...)
}

// release asks the child to let go of its leadership.
func (c *child) release() { c.write("release") }

// stop closes the child's stdin (it releases and exits) and reaps it.
func (c *child) stop() {
	c.t.Helper()
	_ = c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(wait):
		c.t.Errorf("child %d did not exit", c.pid())
	}
	c.reap()
}

// kill9 kills the child with SIGKILL and reaps it.
func (c *child) kill9() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
	c.reap()
}

func (c *child) signal(sig syscall.Signal) { _ = c.cmd.Process.Signal(sig) }

func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-c.exited:
	case <-time.After(wait):
	}
	c.reap()
}

func (c *child) reap() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.stdin.Close()
		_ = c.cmd.Wait()
	})
}
