//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rsetcd "github.com/runnerstate/runnerstate/etcd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// The demo's copies are the test binary re-executed with demoEnv set to
// their arguments (JSON), as two "machines" would run the command.
const demoEnv = "RUNNERSTATE_CLUSTER_DEMO_ARGS"

func TestMain(m *testing.M) {
	if v := os.Getenv(demoEnv); v != "" {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			os.Exit(2)
		}
		main2(args)
	}
	goleak.VerifyTestMain(m)
}

func main2(args []string) {
	os.Args = append([]string{"cluster"}, args...)
	main()
}

const wait = 60 * time.Second

// demo is one running copy of the command.
type demo struct {
	t     *testing.T
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	more  chan struct{}
	done  chan struct{}
}

func startDemo(t *testing.T, args ...string) *demo {
	t.Helper()
	data, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), demoEnv+"="+string(data), "GORACE=atexit_sleep_ms=0")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	d := &demo{t: t, cmd: cmd, more: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.mu.Lock()
			d.lines = append(d.lines, sc.Text())
			close(d.more)
			d.more = make(chan struct{})
			d.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.done
		_ = cmd.Wait()
	})
	return d
}

// expect waits for a line containing s, after the ones already expected,
// and returns it.
func (d *demo) expect(s string, from *int) string {
	d.t.Helper()
	timeout := time.After(wait)
	for {
		d.mu.Lock()
		for ; *from < len(d.lines); *from++ {
			if line := d.lines[*from]; strings.Contains(line, s) {
				*from++
				d.mu.Unlock()
				return line
			}
		}
		more := d.more
		d.mu.Unlock()
		select {
		case <-more:
		case <-d.done:
			d.t.Fatalf("the copy ended without printing %q: %q", s, d.lines)
		case <-timeout:
			d.t.Fatalf("no %q within %v: %q", s, wait, d.lines)
		}
	}
}

// stop interrupts the copy as Ctrl-C does and checks it exits 130.
func (d *demo) stop() {
	d.t.Helper()
	d.stopWith(syscall.SIGINT, 130)
}

// stopWith sends sig and checks the exit code.
func (d *demo) stopWith(sig syscall.Signal, code int) {
	d.t.Helper()
	require.NoError(d.t, d.cmd.Process.Signal(sig))
	<-d.done
	err := d.cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(d.t, err, &ee, "exit code %d expected", code)
	assert.Equal(d.t, code, ee.ExitCode())
}

func runCmd(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDemoTakeoverAcrossMachines(t *testing.T) {
	a := startDemo(t, "--name", "a", "--listen", "127.0.0.1:0", "--ttl", "2s", "--job", "50ms")
	var ai, bi int
	line := a.expect("serving etcd on ", &ai)
	addr := strings.Fields(strings.TrimPrefix(line[strings.Index(line, "serving etcd on "):], "serving etcd on "))[0]
	addr = strings.TrimSuffix(addr, ";")
	a.expect("leader of /runnerstate/demo", &ai)
	a.expect("job 1 done", &ai)

	b := startDemo(t, "--name", "b", "--endpoints", addr, "--ttl", "2s", "--job", "50ms")
	b.expect("leader of /runnerstate/demo", &bi)
	a.expect("stepped down (asked to restart now)", &ai)
	a.expect("standing by", &ai)
	// "standing by" is printed as the Campaign starts: wait for its mark.
	waitStandby(t, addr, "/runnerstate/demo", 1)

	code, out, errOut := runCmd("status", "--json", "--endpoints", addr)
	require.Equal(t, 0, code, errOut)
	var rep struct {
		Key    string `json:"key"`
		Held   bool   `json:"held"`
		Holder struct {
			Record struct {
				PID  int  `json:"pid"`
				Meta Meta `json:"meta"`
			} `json:"record"`
			Token int64 `json:"token"`
		} `json:"holder"`
		Waiting []any `json:"waiting"`
		Standby []struct {
			PID int `json:"pid"`
		} `json:"standby"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.True(t, rep.Held)
	assert.Equal(t, "b", rep.Holder.Record.Meta.Name)
	assert.Equal(t, b.cmd.Process.Pid, rep.Holder.Record.PID)
	assert.NotNil(t, rep.Waiting)
	require.Len(t, rep.Standby, 1)
	assert.Equal(t, a.cmd.Process.Pid, rep.Standby[0].PID)

	code, out, _ = runCmd("status", "--endpoints", addr)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "leader   b: pid")
	assert.Contains(t, out, "standby  1. pid")
	code, out, _ = runCmd("status", "--endpoints", addr, "--key", "/runnerstate/nobody")
	assert.Equal(t, 3, code, "no leader: the LSB code for not running\n%s", out)
	assert.Contains(t, out, "leader   none")

	code, out, _ = runCmd("restart", "--drain", "--endpoints", addr)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "(drain)")
	b.expect("asked to drain", &bi)
	b.expect("stepped down (drained)", &bi)
	a.expect("leader of /runnerstate/demo", &ai) // the standby's turn

	b.stop()
	a.stop()
}

// waitStandby waits until key has n standbys, looking again at each change
// under the key, and fails after wait.
func waitStandby(t *testing.T, addr, key string, n int) {
	t.Helper()
	cli, err := connect([]string{addr})
	require.NoError(t, err)
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	changes := cli.Watch(ctx, key, clientv3.WithRange(key+"0"))
	for {
		rep, err := rsetcd.Status(ctx, cli, key)
		if err == nil && len(rep.Standby) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never had %d standbys: %+v %v", key, n, rep, err)
		case <-changes:
		}
	}
}

func TestDemoRefusesWhatIsNotLoopback(t *testing.T) {
	for _, args := range [][]string{
		{"--endpoints", "192.0.2.1:2379"},
		{"status", "--endpoints", "example.com:2379"},
		{"--listen", "0.0.0.0:23790"},
	} {
		code, _, errOut := runCmd(args...)
		assert.Equal(t, 2, code, "%v", args)
		assert.Contains(t, errOut, "loopback", "%v", args)
	}
	code, _, _ := runCmd("restart", "--endpoints", "127.0.0.1:1")
	assert.Equal(t, 2, code, "restart needs --drain or --now")
	code, _, _ = runCmd("bogus")
	assert.Equal(t, 2, code)
}

// TestDemoKeepsEtcdDataAcrossRestarts restarts the copy that serves etcd on
// the same address and data dir: the next leadership's token is higher, as
// the docs promise; SIGTERM exits 143.
func TestDemoKeepsEtcdDataAcrossRestarts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	listen := ln.Addr().String()
	require.NoError(t, ln.Close())
	dir := filepath.Join(t.TempDir(), "etcd")
	token := func(d *demo) int64 {
		i := 0
		line := d.expect("(fencing token ", &i)
		n, err := strconv.ParseInt(strings.TrimSuffix(line[strings.LastIndex(line, " ")+1:], ")"), 10, 64)
		require.NoError(t, err, line)
		return n
	}
	a := startDemo(t, "--listen", listen, "--etcd-dir", dir, "--ttl", "2s")
	first := token(a)
	a.stopWith(syscall.SIGTERM, 143)
	b := startDemo(t, "--listen", listen, "--etcd-dir", dir, "--ttl", "2s")
	second := token(b)
	assert.Greater(t, second, first, "tokens keep increasing across a restart of the serving copy")
	b.stop()
}

// TestDemoHelp: every flag with its default, the TTL the package's, and
// the exit codes.
func TestDemoHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"status", "--help"}} {
		code, out, _ := runCmd(args...)
		assert.Equal(t, 0, code, "%v", args)
		for _, want := range []string{"exit codes", "130", "143", "75", "status", "-ttl duration", "(default " + rsetcd.DefaultTTL.String() + ")",
			"-grace", "-kill-after", "-job", "-dir", "-etcd-dir", "-listen", "-endpoints", "-json", "-drain", "-now"} {
			assert.Contains(t, out, want, "%v", args)
		}
	}
}

// TestDemoUnreachableEndpoint: status and restart against an endpoint with
// no etcd name it, say etcd could not be reached, give advice, and exit 1.
func TestDemoUnreachableEndpoint(t *testing.T) {
	for _, args := range [][]string{{"status"}, {"restart", "--now"}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			code, _, errOut := runCmd(append(args, "--endpoints", "127.0.0.1:1")...)
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, "127.0.0.1:1")
			assert.Contains(t, errOut, "etcd could not be reached")
			assert.Contains(t, errOut, "--serve-etcd")
		})
	}
}
