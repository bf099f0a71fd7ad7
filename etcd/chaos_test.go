//go:build linux

package etcd

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The chaos run's bounds: at most chaosRounds faults, and no new fault once
// chaosBudget has passed.
const (
	chaosRounds = 12
	chaosBudget = 45 * time.Second
)

// TestChaos runs three "machines", each a runner process that reaches etcd
// through a proxy of its own, campaigning in a loop and making a fenced
// witness write every 20 ms without looking at Lost (as careless work
// does). Each round hits the leader with one fault, drawn at random: kill -9
// (the machine gets a fresh process), a partition of its proxy, SIGSTOP
// (then SIGCONT), or a restart request. After the run the whole witness
// history is checked against etcd's record of the leader key: zero stale
// fenced writes may have been accepted. Tokens must strictly increase, and
// after each partition Lost must have come before the next admission by at
// least SafetyMargin/2. Set RUNNERSTATE_CHAOS_SEED to replay a run.
func TestChaos(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("RUNNERSTATE_CHAOS_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("chaos seed %d (RUNNERSTATE_CHAOS_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	o, err := Options{TTL: testTTL}.resolve()
	require.NoError(t, err)

	s := startEtcd(t)
	cli := client(t, s.addr)
	const key = "/chaos"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type machine struct {
		p *proxy
		c *child
	}
	var everyone []*child // every process of the run, killed ones included
	boot := func(p *proxy) *child {
		c := startRunner(t, spec{Endpoint: p.addr(), Key: key, How: "campaign", Obey: true, Loop: true,
			Witness: 20 * time.Millisecond, Linger: 100 * time.Millisecond})
		everyone = append(everyone, c)
		return c
	}
	var machines []*machine
	for range 3 {
		p := startProxy(t, s.addr)
		machines = append(machines, &machine{p: p, c: boot(p)})
	}
	changes := Observe(ctx, cli, key)
	next := func(after int64) Holder {
		t.Helper()
		timeout := time.NewTimer(wait)
		defer timeout.Stop()
		for {
			select {
			case h := <-changes:
				if h.Token > after {
					return h
				}
			case <-timeout.C:
				t.Fatalf("no leader after token %d within %v", after, wait)
			}
		}
	}
	leaderOf := func(h Holder) *machine {
		t.Helper()
		for _, m := range machines {
			if m.c.pid() == h.Record.PID {
				return m
			}
		}
		t.Fatalf("leader pid %d is none of the machines'", h.Record.PID)
		return nil
	}
	var tokens []int64
	admittedAt := func(h Holder) event {
		return leaderOf(h).c.find(func(e event) bool { return e.Ev == "admitted" && e.Token == h.Token })
	}
	// settle waits until a leader is at work (a fenced write of its own
	// accepted) before the next fault, following the leadership on when it
	// is lost first (a leader admitted just as it was paused).
	settle := func(h Holder) Holder {
		for {
			e := leaderOf(h).c.find(func(e event) bool { return e.Token == h.Token && (e.Ev == "lost" || e.Ev == "write" && e.OK) })
			if e.Ev != "lost" {
				return h
			}
			tokens = append(tokens, h.Token)
			h = next(h.Token)
		}
	}

	cur := settle(next(0))
	tokens = append(tokens, cur.Token)
	faults := map[string]int{}
	var leads, overlaps []time.Duration
	deadline := time.Now().Add(chaosBudget)
	for round := 0; round < chaosRounds && time.Now().Before(deadline); round++ {
		m := leaderOf(cur)
		fault := []string{"kill", "partition", "stop", "restart"}[rng.IntN(4)]
		faults[fault]++
		var h Holder
		switch fault {
		case "kill":
			m.c.kill9()
			h = next(cur.Token)
			m.c = boot(m.p)
		case "partition":
			m.p.cut()
			h = next(cur.Token)
			admitted := admittedAt(h)
			lost := m.c.find(func(e event) bool { return e.Ev == "lost" && e.Token == cur.Token })
			m.p.heal()
			lead := time.Duration(admitted.Mono - lost.Mono)
			leads = append(leads, lead)
			assert.GreaterOrEqual(t, lead, o.SafetyMargin/2, "round %d: Lost before the next admission", round)
		case "stop":
			m.c.signal(syscall.SIGSTOP)
			h = next(cur.Token)
			admitted := admittedAt(h)
			m.c.signal(syscall.SIGCONT)
			// The paused leader learns of its loss only when it runs again:
			// the overlap of unfenced work the package documents.
			lost := m.c.find(func(e event) bool { return e.Ev == "lost" && e.Token == cur.Token })
			overlaps = append(overlaps, time.Duration(lost.Mono-admitted.Mono))
		case "restart":
			mode := runnerstate.RestartNow
			if rng.IntN(2) == 0 {
				mode = runnerstate.RestartDrain
			}
			require.NoError(t, RequestRestart(ctx, cli, key, mode))
			h = next(cur.Token)
		}
		cur = settle(h)
		tokens = append(tokens, cur.Token)
	}
	for _, m := range machines {
		m.c.stop()
	}

	var rejected, writes int
	for _, c := range everyone {
		for _, e := range c.all() {
			if e.Ev == "write" {
				writes++
				if !e.OK && e.Err == "" {
					rejected++
				}
			}
		}
	}
	accepted, stale := verifyWitness(t, cli, key)
	assert.Zero(t, stale, "zero accepted stale fenced writes")
	for i := 1; i < len(tokens); i++ {
		assert.Greater(t, tokens[i], tokens[i-1], "tokens strictly increase: %v", tokens)
	}
	t.Logf("chaos figures: %d processes, faults %v; %d leaders; witness writes %d (accepted %d, stale accepted %d, rejected by the fence %d); Lost ahead of admission after partitions %v; paused leaders learned their loss %v after the next admission",
		len(everyone), faults, len(tokens), writes, accepted, stale, rejected, leads, overlaps)
}
