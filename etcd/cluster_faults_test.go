//go:build linux

package etcd

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The faults of the cluster run.
const (
	faultContenderPause = "contender-pause" // SIGSTOP the leading contender until a successor is admitted
	faultContenderKill  = "contender-kill"  // kill -9 the leading contender
	faultFollowerPause  = "follower-pause"  // SIGSTOP a follower member for memberFault
	faultFollowerKill   = "follower-kill"   // kill -9 a follower member, restart it after memberDown
	faultLeaderPause    = "leader-pause"    // SIGSTOP the raft leader member for memberFault
	faultLeaderKill     = "leader-kill"     // kill -9 the raft leader member, restart it after memberDown
)

const (
	memberFault = 4 * time.Second // a member's pause
	memberDown  = 2 * time.Second // a killed member stays down this long
)

// clusterPlan is the run's faults: one of each, and a second contender
// pause, for CI; RUNNERSTATE_ETCD_SOAK=N gives N faults, every third a
// contender pause and the others each kind in turn.
func clusterPlan(t testing.TB) []string {
	if v := os.Getenv("RUNNERSTATE_ETCD_PLAN"); v != "" {
		return strings.Split(v, ",") // faults by name, to replay one kind
	}
	n := 0
	if v := os.Getenv("RUNNERSTATE_ETCD_SOAK"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "RUNNERSTATE_ETCD_SOAK is a number of faults")
	}
	if n == 0 {
		return []string{faultContenderPause, faultFollowerPause, faultLeaderPause, faultContenderKill, faultFollowerKill, faultLeaderKill, faultContenderPause}
	}
	others := []string{faultFollowerPause, faultContenderKill, faultLeaderPause, faultFollowerKill, faultLeaderKill}
	var plan []string
	for i := range n {
		if i%3 == 0 {
			plan = append(plan, faultContenderPause)
		} else {
			plan = append(plan, others[(i-i/3-1)%len(others)])
		}
	}
	return plan
}

// TestClusterFaults runs three contender processes against a real
// three-member etcd cluster (members as processes on loopback, each with
// its own data dir) and injects faults: SIGSTOP and kill -9 of the leading
// contender, of a follower member and of the raft leader member. The
// contenders work as the docs tell users to: Valid before each action, an
// unfenced action appended to a local log, a fenced witness write to etcd
// bounded by a short timeout, and Publish every 50 ms.
//
// A checker then goes over etcd's history and the local append-only log,
// as a Jepsen run does: no stale fenced write accepted; no action of a
// paused leader after it resumed past its deadline; every admission at
// least SafetyMargin after the previous leader's loss (its Lost, or its
// deadline when it was paused); failover after kill -9 within TTL + 1 s;
// with a frozen follower the leader keeps its leadership and Publish
// resumes within 1 s.
//
// RUNNERSTATE_ETCD_SOAK=60 makes it a soak of 60 faults;
// RUNNERSTATE_ETCD_MEMBERS=embedded runs the module's etcd as the members.
func TestClusterFaults(t *testing.T) {
	plan := clusterPlan(t)
	c := startCluster(t)
	eps := c.endpoints()
	cli := client(t, eps)
	_, version, err := c.status(cli, c.members[0])
	require.NoError(t, err)
	flavor := "etcd binary " + c.bin
	if c.bin == "" {
		flavor = "embedded members"
	}
	t.Logf("cluster: %s, version %s; %d faults", flavor, version, len(plan))
	o, err := Options{TTL: clusterTTL}.resolve()
	require.NoError(t, err)

	const key = "/cluster"
	localLog := filepath.Join(t.TempDir(), "actions.log")
	sink := make(chan event, 1<<16)
	byPID := map[int]*child{}
	var everyone []*child
	boot := func() *child {
		ch := startRunnerTo(t, spec{Endpoint: eps, Key: key, How: "campaign", Loop: true, TTL: clusterTTL,
			Witness: 20 * time.Millisecond, Careful: true, LocalLog: localLog, Publish: 50 * time.Millisecond}, sink)
		byPID[ch.pid()] = ch
		everyone = append(everyone, ch)
		return ch
	}
	for range 3 {
		boot()
	}

	// The admissions, in the order the sink gives them.
	type admission struct {
		e event
		c *child
	}
	var admissions []admission
	ended := map[int64]event{} // token -> its lost or released event
	take := func(e event) {
		switch e.Ev {
		case "admitted":
			admissions = append(admissions, admission{e, byPID[e.PID]})
		default: // "lost", or "released" (after a loss too: only the first counts)
			if _, seen := ended[e.Token]; !seen {
				ended[e.Token] = e
			}
		}
	}
	// nextAdmission waits for an admission with a token over after.
	nextAdmission := func(after int64) admission {
		t.Helper()
		for _, a := range admissions {
			if a.e.Token > after {
				return a
			}
		}
		timeout := time.NewTimer(wait)
		defer timeout.Stop()
		for {
			select {
			case e := <-sink:
				take(e)
				if e.Ev == "admitted" && e.Token > after {
					return admissions[len(admissions)-1]
				}
			case <-timeout.C:
				t.Fatalf("no admission after token %d within %v", after, wait)
			}
		}
	}
	takePending := func() {
		for {
			select {
			case e := <-sink:
				take(e)
			default:
				return
			}
		}
	}
	// settle returns the leadership at work: the latest admission, once it
	// has published after since, following it on if it was lost.
	settle := func(since int64) admission {
		t.Helper()
		cur := nextAdmission(0)
		for {
			takePending()
			cur = admissions[len(admissions)-1]
			e := cur.c.find(func(e event) bool {
				return e.Token == cur.e.Token && (e.Ev == "lost" || e.Ev == "published" && e.OK && e.Rev > since)
			})
			if e.Ev == "published" {
				return cur
			}
			nextAdmission(cur.e.Token)
		}
	}

	type pause struct {
		token   int64
		resumed int64
	}
	var pauses []pause
	var failovers, publishGaps, writeGaps []time.Duration
	keptFollower, lostInMemberFault := 0, map[string]int{}
	counts := map[string]int{}
	cur := settle(0)
	for i, fault := range plan {
		counts[fault]++
		faultStart := mono()
		switch fault {
		case faultContenderPause:
			cur.c.signal(syscall.SIGSTOP)
			nextAdmission(cur.e.Token)
			resumed := mono()
			cur.c.signal(syscall.SIGCONT)
			pauses = append(pauses, pause{cur.e.Token, resumed})
			cur.c.find(func(e event) bool { return e.Ev == "lost" && e.Token == cur.e.Token })
		case faultContenderKill:
			killed := mono()
			cur.c.kill9()
			next := nextAdmission(cur.e.Token)
			failovers = append(failovers, time.Duration(next.e.Mono-killed))
			boot()
		case faultFollowerPause, faultLeaderPause, faultFollowerKill, faultLeaderKill:
			leader, follower := c.raftLeader(cli)
			m := follower
			if fault == faultLeaderPause || fault == faultLeaderKill {
				m = leader
			}
			if fault == faultFollowerPause || fault == faultLeaderPause {
				c.signal(m, syscall.SIGSTOP)
				time.Sleep(memberFault) // the fault's length, not a synchronisation
				c.signal(m, syscall.SIGCONT)
			} else {
				c.kill9(m)
				time.Sleep(memberDown) // the fault's length, not a synchronisation
				c.restart(m)
			}
			faultEnd := mono()
			c.waitHealthy()
			before := cur.e.Token
			cur = settle(mono())
			kept := cur.e.Token == before
			if !kept {
				lostInMemberFault[fault]++
			}
			if fault == faultFollowerPause {
				assert.True(t, kept, "fault %d (%s): a frozen follower cost the leader its leadership", i, fault)
				if kept {
					keptFollower++
					publishGaps = append(publishGaps, longestGap(cur.c.all(), "published", cur.e.Token, faultStart, faultEnd))
					writeGaps = append(writeGaps, longestGap(cur.c.all(), "write", cur.e.Token, faultStart, faultEnd))
				}
			}
		}
		cur = settle(mono())
		t.Logf("fault %d/%d %s done in %v; leader token %d", i+1, len(plan), fault, time.Duration(mono()-faultStart).Round(time.Millisecond), cur.e.Token)
	}
	for _, ch := range everyone {
		ch.stop()
	}
	takePending()

	// The checker.
	accepted, stale := verifyWitness(t, cli, key)
	assert.Zero(t, stale, "stale fenced writes accepted")

	// No action, fenced or not, by a paused leader after it resumed.
	lateActions, lateWrites := 0, 0
	for _, line := range readLines(t, localLog) {
		var pid int
		var token, n, checked int64
		_, err := fmt.Sscan(line, &pid, &token, &n, &checked)
		require.NoError(t, err, "local log line %q", line)
		for _, p := range pauses {
			if token == p.token && checked > p.resumed {
				lateActions++
				t.Errorf("a paused leader (token %d) acted after it resumed: %q", token, line)
			}
		}
	}
	var writes, refused, guarded int
	for _, ch := range everyone {
		for _, e := range ch.all() {
			if e.Ev == "log" && strings.Contains(e.Msg, "revoked before its time") {
				guarded++ // a waiter saw etcd revoke a live lease, and waited a TTL
			}
			if e.Ev != "write" {
				continue
			}
			writes++
			if !e.OK && e.Err == "" {
				refused++
			}
			for _, p := range pauses {
				if e.Token == p.token && e.Rev > p.resumed {
					lateWrites++
				}
			}
		}
	}
	assert.Zero(t, lateWrites, "fenced writes tried by a paused leader after it resumed")

	// Every admission at least SafetyMargin after the previous leader's
	// loss, unless it released (none does here) or was killed (no loss to
	// see: the failover is measured instead).
	slices.SortFunc(admissions, func(a, b admission) int { return int(a.e.Token - b.e.Token) })
	var gaps []time.Duration
	early := 0 // losses etcd caused by revoking a lease before its time
	for i := 1; i < len(admissions); i++ {
		prev, next := admissions[i-1], admissions[i]
		lost, ok := ended[prev.e.Token]
		if !ok || lost.Ev == "released" || strings.Contains(lost.Why, "released") {
			continue
		}
		at := lost.Mono
		if lost.At != 0 && lost.At < at {
			at = lost.At
		}
		gap := time.Duration(next.e.Mono - at)
		if gap < o.SafetyMargin {
			if lost.At > next.e.Mono && !strings.Contains(lost.Why, "deadline") {
				early++ // lost by etcd's doing while its own deadline was still ahead
				t.Logf("token %d: etcd removed a live leader (%s) and token %d was admitted %v after; its own deadline was %v later",
					prev.e.Token, lost.Why, next.e.Token, time.Duration(next.e.Mono-lost.Mono), time.Duration(lost.At-next.e.Mono))
				t.Errorf("etcd %s revoked a live leader's lease early (token %d), and the next was admitted without waiting a TTL", version, prev.e.Token)
				for _, e := range next.c.all() {
					if e.Ev == "log" && e.Mono > lost.Mono-int64(5*time.Second) && e.Mono < next.e.Mono+int64(time.Second) {
						t.Logf("  successor %d at %v: %s", next.c.pid(), time.Duration(e.Mono-lost.Mono), e.Msg)
					}
				}
				continue
			}
			t.Errorf("token %d admitted %v after token %d's loss (%s), under SafetyMargin %v", next.e.Token, gap, prev.e.Token, lost.Why, o.SafetyMargin)
		}
		gaps = append(gaps, gap)
	}
	for _, f := range failovers {
		assert.LessOrEqual(t, f, clusterTTL+time.Second, "failover after kill -9 within TTL + 1 s")
	}
	if os.Getenv("RUNNERSTATE_ETCD_SOAK") != "" {
		// The target, checked in the measured run only (a shared CI
		// machine under the race detector can stretch any one call).
		for _, g := range publishGaps {
			assert.LessOrEqual(t, g, time.Second, "with a frozen follower, Publish resumes within 1 s")
		}
	}
	t.Logf("cluster figures (%s, etcd %s, TTL %v, SafetyMargin %v, election %d ms): faults %v; %d leaders; fenced writes tried %d (accepted %d, stale accepted %d, refused by the fence %d); paused leaders' actions after resume: local %d, fenced %d; admission after the previous loss: min %v over %d (early revokes by etcd admitted without the wait: %d; seen by a waiter, which waited a TTL: %d); failover after kill -9 %v; frozen follower: leadership kept %d/%d, longest Publish gap %v, longest careful write gap %v; leadership lost in member faults %v",
		flavor, version, clusterTTL, o.SafetyMargin, clusterElection, counts, len(admissions), writes, accepted, stale, refused,
		lateActions, lateWrites, minDur(gaps), len(gaps), early, guarded, summary(failovers), keptFollower, counts[faultFollowerPause], maxDur(publishGaps), maxDur(writeGaps), lostInMemberFault)
}

// longestGap is the longest time within [from, to] without a successful
// event named ev of token (a Publish or a write answered OK), counted from
// when each began.
func longestGap(events []event, ev string, token, from, to int64) time.Duration {
	last, longest := from, int64(0)
	for _, e := range events {
		if e.Ev != ev || e.Token != token || !e.OK || e.Mono < from {
			continue
		}
		if e.Mono > to {
			break
		}
		longest = max(longest, e.Mono-last)
		last = e.Mono
	}
	return time.Duration(max(longest, to-last))
}

func readLines(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.NoError(t, sc.Err())
	return lines
}

func minDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Min(ds)
}

func maxDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

// summary is "p50 x, max y (n)".
func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("p50 %v, max %v (%d)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}
