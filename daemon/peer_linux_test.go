package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two users of the peer tests, neither root nor nobody (the overflow uid
// is never trusted): alice runs the verified server, mallory attacks it.
const (
	alice   = 4343
	mallory = 4242
)

const envSquat = "RS_DAEMON_SQUAT" // the squatter's "network address"

func init() {
	roles["squatter"] = roleSquatter
	roles["dialer"] = roleDialer
}

// squatter: listen on $RS_DAEMON_SQUAT, say "listening <address>", and for
// each connection write "squatter" and say "read <n>": the bytes the client
// sent before it closed. Exit at stdin's EOF.
func roleSquatter(string) int {
	network, address, _ := strings.Cut(os.Getenv(envSquat), " ")
	ln, err := net.Listen(network, address)
	if err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	testharness.Say("listening %s", ln.Addr())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "squatter")
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			testharness.Say("read %d", n)
		}
	}()
	for range testharness.Commands() {
	}
	ln.Close()
	return 0
}

// dialer: Dial dir (no command) and ping; say "ok <answer>" or "error
// <err>".
func roleDialer(dir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait/4)
	defer cancel()
	c, _, err := Dial(ctx, dir, nil, DialOptions{})
	if err != nil {
		testharness.Say("error untrusted=%v %v", errors.Is(err, ErrUntrustedPeer), err)
		return 0
	}
	defer c.Close()
	got, err := ping(c, "ping")
	if err != nil {
		testharness.Say("error ping: %v", err)
		return 0
	}
	testharness.Say("ok %s", strings.TrimSpace(got))
	return 0
}

// users prepares processes of other uids: a copy of the test binary every
// user may run, in a directory every user may enter (t.TempDir's and the go
// tool's are 0700). Skipped unless root.
type users struct {
	t   *testing.T
	bin string
	pub string // a directory every user may enter
}

func otherUsers(t *testing.T) *users {
	t.Helper()
	bin, _ := testharness.AsUser(t, mallory)
	return &users{t: t, bin: bin, pub: filepath.Dir(bin)}
}

// dir makes a directory of uid's (mode 0755) in the public directory.
func (u *users) dir(name string, uid int) string {
	d := filepath.Join(u.pub, name)
	require.NoError(u.t, os.Mkdir(d, 0o755))
	require.NoError(u.t, os.Chown(d, uid, uid))
	return d
}

// as makes cmd (a re-executed test binary) run the public copy as uid.
func (u *users) as(cmd *exec.Cmd, uid int) *exec.Cmd {
	cmd.Path = u.bin
	cmd.Args[0] = u.bin
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	return cmd
}

// server starts a server of dir as uid, ready when it returns.
func (u *users) server(dir string, uid int, opts Options) *testharness.Child {
	u.t.Helper()
	data, _ := json.Marshal(opts)
	cmd := u.as(testharness.Command(dir), uid)
	cmd.Env = append(os.Environ(), envServerOptions+"="+string(data))
	s := testharness.StartCmd(u.t, cmd, "server")
	s.Expect("ready")
	return s
}

// squatter starts a listener of uid's on network and address; it returns
// the child and the address it listens on.
func (u *users) squatter(uid int, network, address string) (*testharness.Child, string) {
	u.t.Helper()
	cmd := u.as(testharness.Command("-"), uid)
	cmd.Env = append(os.Environ(), envSquat+"="+network+" "+address)
	c := testharness.StartCmd(u.t, cmd, "squatter")
	return c, strings.TrimPrefix(c.Expect("listening "), "listening ")
}

// dialer runs Dial on dir as uid and returns its line.
func (u *users) dialer(dir string, uid int) string {
	u.t.Helper()
	c := testharness.StartCmd(u.t, u.as(testharness.Command(dir), uid), "dialer")
	line := c.Expect("")
	require.NoError(u.t, c.Wait())
	return line
}

// pingDial dials dir as this process (root) and pings its server.
func pingDial(t *testing.T, dir string) string {
	t.Helper()
	c, _, err := Dial(background(t), dir, nil, DialOptions{})
	require.NoError(t, err)
	defer c.Close()
	got, err := ping(c, "ping")
	require.NoError(t, err)
	return got
}

// setEndpoint rewrites the address of runner.json's first endpoint in
// place (its owner stays), as a user who could write it would.
func setEndpoint(t *testing.T, dir, address string) {
	t.Helper()
	path := filepath.Join(dir, runnerstate.RecordName)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(data, &rec))
	rec["endpoints"].([]any)[0].(map[string]any)["address"] = address
	data, err = json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o644))
}

// With alice's verified server running, mallory swaps its socket file for
// her own listening socket: Dial refuses with ErrUntrustedPeer, naming the
// socket and both uids, and sends her nothing. A socket of root's in its
// place is accepted.
func TestDialRefusesASwappedSocket(t *testing.T) {
	u := otherUsers(t)
	dir := u.dir("a", alice)
	u.server(dir, alice, Options{Endpoints: unixEndpoint("d.sock")})
	assert.Contains(t, pingDial(t, dir), "pong", "alice's server, verified")

	sock := filepath.Join(dir, "d.sock")
	sq, evil := u.squatter(mallory, "unix", filepath.Join(u.dir("m", mallory), "evil.sock"))
	require.NoError(t, os.Rename(evil, sock)) // the swap (the directory was hers to write)
	_, _, err := Dial(background(t), dir, nil, DialOptions{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUntrustedPeer)
	assert.Contains(t, err.Error(), sock)
	assert.Contains(t, err.Error(), fmt.Sprintf("uid %d", mallory))
	assert.Contains(t, err.Error(), fmt.Sprintf("uid %d", alice))
	assert.Equal(t, "0", sq.Expect("read"), "the connection was closed with nothing sent")

	// Root's listener in its place: root is trusted.
	rootSock := filepath.Join(u.pub, "root.sock")
	ln, err := net.Listen("unix", rootSock)
	require.NoError(t, err)
	defer ln.Close()
	require.NoError(t, os.Rename(rootSock, sock))
	c, _, err := Dial(background(t), dir, nil, DialOptions{})
	require.NoError(t, err, "a peer that is root")
	c.Close()
	got, err := ln.Accept()
	require.NoError(t, err, "the connection reached root's listener")
	got.Close()
}

// A TCP endpoint where mallory listens instead of alice's server (here:
// runner.json's endpoint rewritten to her port): sock_diag names her uid and
// Dial refuses. Alice's own listener passes, and so does root's.
func TestDialRefusesATCPListenerOfAnotherUser(t *testing.T) {
	u := otherUsers(t)
	dir := u.dir("a", alice)
	u.server(dir, alice, Options{Endpoints: []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:0"}}})
	assert.Contains(t, pingDial(t, dir), "pong", "alice's server, its listener's uid read through sock_diag")

	sq, evil := u.squatter(mallory, "tcp", "127.0.0.1:0")
	setEndpoint(t, dir, evil)
	_, _, err := Dial(background(t), dir, nil, DialOptions{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUntrustedPeer)
	assert.Contains(t, err.Error(), evil)
	assert.Contains(t, err.Error(), fmt.Sprintf("uid %d", mallory))
	assert.Contains(t, err.Error(), fmt.Sprintf("uid %d", alice))
	assert.Equal(t, "0", sq.Expect("read"), "the connection was closed with nothing sent")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	setEndpoint(t, dir, ln.Addr().String())
	c, _, err := Dial(background(t), dir, nil, DialOptions{})
	require.NoError(t, err, "a peer that is root")
	c.Close()
}

// A server's socket file is 0600 whatever the umask: a client of another
// uid is refused by the kernel, and the error names the socket's mode and
// Endpoint.Mode. With Mode 0666 that client connects, and its Dial checks
// the server's uid as any other.
func TestSocketModeKeepsOtherUsersOut(t *testing.T) {
	u := otherUsers(t)
	dir := u.dir("a", alice)
	old := syscall.Umask(0)
	s := u.server(dir, alice, Options{Endpoints: unixEndpoint("d.sock")})
	syscall.Umask(old)
	fi, err := os.Stat(filepath.Join(dir, "d.sock"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "bound under umask 0")
	rec, _, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), rec.Endpoints[0].Mode, "published as bound")

	line := u.dialer(dir, mallory)
	assert.Contains(t, line, "permission denied")
	assert.Contains(t, line, "mode 0600")
	assert.Contains(t, line, "Endpoint.Mode")
	assert.Contains(t, line, "untrusted=false")

	require.NoError(t, Stop(background(t), dir, runnerstate.RestartNow))
	require.NoError(t, s.Wait())
	old = syscall.Umask(0o022)
	u.server(dir, alice, Options{Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "d.sock", Mode: 0o666}}})
	syscall.Umask(old)
	fi, err = os.Stat(filepath.Join(dir, "d.sock"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o666), fi.Mode().Perm(), "bound under umask 022")
	assert.Regexp(t, `^ok pong `, u.dialer(dir, mallory))
}

// sock_diag names the uid of the socket listening on an exact address, and
// says when none does.
func TestListenerUIDFromSockDiag(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		ln, err := net.Listen(network, map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0"}[network])
		if err != nil {
			t.Logf("%s: %v", network, err)
			continue
		}
		addr := ln.Addr().(*net.TCPAddr)
		uid, err := listenerUID(addr)
		require.NoError(t, err, network)
		assert.Equal(t, os.Geteuid(), uid, network)
		ln.Close()
		_, err = listenerUID(addr)
		require.Error(t, err, network)
		assert.Contains(t, err.Error(), "no socket listens on "+addr.String())
	}
	// A dual-stack listener answers for an IPv4 address.
	if ln, err := net.Listen("tcp", "[::]:0"); err == nil {
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		uid, err := listenerUID(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		require.NoError(t, err)
		assert.Equal(t, os.Geteuid(), uid)
	}
}

// A socket handed over keeps its file, which is given the successor's Mode.
func TestSocketModeFollowsTheServer(t *testing.T) {
	dir := shortDir(t)
	startServer(t, dir, Options{Endpoints: unixEndpoint("d.sock")}).Expect("ready inherited=0")
	fi, err := os.Stat(filepath.Join(dir, "d.sock"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	next := startServer(t, dir, Options{Mode: runnerstate.RestartNow,
		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "d.sock", Mode: 0o660}}})
	next.Expect("ready inherited=1")
	fi2, err := os.Stat(filepath.Join(dir, "d.sock"))
	require.NoError(t, err)
	assert.True(t, os.SameFile(fi, fi2), "the same socket file")
	assert.Equal(t, os.FileMode(0o660), fi2.Mode().Perm())
	rec, _, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o660), rec.Endpoints[0].Mode)
	require.NoError(t, Stop(background(t), dir, runnerstate.RestartNow))
}
