//go:build linux

package etcd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// The election settings of the test clusters: half etcd's defaults (100 ms,
// 1000 ms), so that the contenders' TTL (clusterTTL) stands to an election
// as the default TTL does to one with etcd's defaults, in half the time.
const (
	clusterHeartbeat = 50  // ms
	clusterElection  = 500 // ms
	clusterTTL       = 4 * time.Second
)

// memberEnv carries an embedded member's etcd flags, as JSON.
const memberEnv = "RUNNERSTATE_ETCD_MEMBER_ARGS"

// member is one etcd member, a process of its own: the etcd binary, or the
// test binary re-executed to run an embedded etcd (the module's version)
// with the same flags.
type member struct {
	name, client, peer, dir string
	args                    []string
	embedded                bool
	logPath                 string

	cmd    *exec.Cmd
	exited chan struct{}
}

// cluster is a three-member etcd cluster on loopback, each member with its
// own data dir under t.TempDir().
type cluster struct {
	t       testing.TB
	bin     string // etcd binary, or "" for embedded members
	members []*member
}

// clusterFlavor picks the members: RUNNERSTATE_ETCD_MEMBERS=embedded runs
// the module's etcd in re-executed test binaries; otherwise the etcd binary
// on PATH (Debian's etcd-server), and the test is skipped without one.
func clusterFlavor(t testing.TB) string {
	if os.Getenv("RUNNERSTATE_ETCD_MEMBERS") == "embedded" {
		return ""
	}
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("no etcd binary on PATH: install one (Debian: apt-get install etcd-server; .ci/etcd.sh does), or set RUNNERSTATE_ETCD_MEMBERS=embedded")
	}
	return bin
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// startCluster starts three members and waits until each answers; they are
// killed when the test ends.
func startCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: clusterFlavor(t)}
	base := t.TempDir()
	var initial []string
	for i := 1; i <= 3; i++ {
		m := &member{name: fmt.Sprintf("m%d", i), client: "http://" + freePort(t), peer: "http://" + freePort(t), embedded: c.bin == ""}
		m.dir = filepath.Join(base, m.name)
		m.logPath = filepath.Join(base, m.name+".log")
		initial = append(initial, m.name+"="+m.peer)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.args = []string{
			"--name", m.name, "--data-dir", m.dir,
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "runnerstate-test",
			"--heartbeat-interval", fmt.Sprint(clusterHeartbeat), "--election-timeout", fmt.Sprint(clusterElection),
		}
		c.start(m)
	}
	t.Cleanup(c.killAll)
	c.waitHealthy()
	return c
}

func (c *cluster) start(m *member) {
	c.t.Helper()
	logf, err := os.OpenFile(m.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	require.NoError(c.t, err)
	if m.embedded {
		data, _ := json.Marshal(m.args)
		m.cmd = exec.Command(os.Args[0], "-test.run=^$")
		m.cmd.Env = append(os.Environ(), roleEnv+"=member", memberEnv+"="+string(data), "GORACE=atexit_sleep_ms=0")
	} else {
		m.cmd = exec.Command(c.bin, m.args...)
	}
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	require.NoError(c.t, m.cmd.Start())
	m.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}(m.cmd, m.exited)
}

func (c *cluster) endpoints() string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client)
	}
	return strings.Join(eps, ",")
}

// kill9 kills m with SIGKILL and waits for its exit.
func (c *cluster) kill9(m *member) {
	_ = m.cmd.Process.Signal(syscall.SIGCONT)
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
}

// restart starts m again on its data dir, as the same member.
func (c *cluster) restart(m *member) { c.start(m) }

func (c *cluster) signal(m *member, sig syscall.Signal) { _ = m.cmd.Process.Signal(sig) }

func (c *cluster) killAll() {
	for _, m := range c.members {
		if m.cmd != nil {
			c.kill9(m)
		}
	}
}

// status asks one member for its status, briefly.
func (c *cluster) status(cli *clientv3.Client, m *member) (leader bool, version string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := cli.Status(ctx, m.client)
	if err != nil {
		return false, "", err
	}
	return resp.Leader == resp.Header.MemberId, resp.Version, nil
}

// waitHealthy waits, bounded, until every member answers and one leads.
func (c *cluster) waitHealthy() {
	c.t.Helper()
	cli, err := newClient(c.endpoints())
	require.NoError(c.t, err)
	defer func() { _ = cli.Close() }()
	deadline := time.Now().Add(wait)
	for {
		leaders, answered := 0, 0
		for _, m := range c.members {
			if l, _, err := c.status(cli, m); err == nil {
				answered++
				if l {
					leaders++
				}
			}
		}
		if answered == len(c.members) && leaders == 1 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the etcd cluster did not become healthy within %v (%d answered, %d leaders)%s", wait, answered, leaders, c.logTails())
		}
		for _, m := range c.members {
			select {
			case <-m.exited:
				c.t.Fatalf("etcd member %s exited while the cluster was forming%s", m.name, c.logTails())
			default:
			}
		}
		// Bounded poll of an outside process's state: nothing to wait on.
		time.Sleep(50 * time.Millisecond)
	}
}

// logTails is the last lines of each member's log, for a failure message:
// the logs are in the test's temporary directory, which goes with the test.
func (c *cluster) logTails() string {
	var b strings.Builder
	for _, m := range c.members {
		data, _ := os.ReadFile(m.logPath)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "\n--- %s (%s), last lines of its log:\n%s", m.name, m.client, strings.Join(lines[max(0, len(lines)-8):], "\n"))
	}
	return b.String()
}

// raftLeader is the member that leads the raft group now, and a follower.
func (c *cluster) raftLeader(cli *clientv3.Client) (leader, follower *member) {
	c.t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		leader, follower = nil, nil
		for _, m := range c.members {
			l, _, err := c.status(cli, m)
			switch {
			case err != nil:
			case l:
				leader = m
			default:
				follower = m
			}
		}
		if leader != nil && follower != nil {
			return leader, follower
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatal("no raft leader and follower found")
	return nil, nil
}

// memberRole runs an embedded etcd member with the etcd binary's flags (the
// subset startCluster gives), until it is killed.
func memberRole() int {
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(memberEnv)), &args); err != nil {
		fmt.Fprintln(os.Stderr, "bad member args:", err)
		return 2
	}
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	name := fs.String("name", "", "")
	dir := fs.String("data-dir", "", "")
	lc := fs.String("listen-client-urls", "", "")
	ac := fs.String("advertise-client-urls", "", "")
	lp := fs.String("listen-peer-urls", "", "")
	ap := fs.String("initial-advertise-peer-urls", "", "")
	ic := fs.String("initial-cluster", "", "")
	state := fs.String("initial-cluster-state", "new", "")
	token := fs.String("initial-cluster-token", "", "")
	hb := fs.Uint("heartbeat-interval", 100, "")
	el := fs.Uint("election-timeout", 1000, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	u := func(s string) []url.URL {
		p, _ := url.Parse(s)
		return []url.URL{*p}
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = *name, *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = u(*lc), u(*ac)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = u(*lp), u(*ap)
	cfg.InitialCluster, cfg.ClusterState, cfg.InitialClusterToken = *ic, *state, *token
	cfg.TickMs, cfg.ElectionMs = *hb, *el
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		return 1
	}
	defer e.Close()
	select { // runs until killed
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "member:", err)
		return 1
	case <-e.Server.StopNotify():
		return 0
	}
}
