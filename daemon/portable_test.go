package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests that run everywhere, Windows (under Wine, which has no unix
// sockets) included: over TCP, in one process.

// Point 11: bad endpoints are refused before anything is taken or created.
func TestBadEndpointsAreRefusedFirst(t *testing.T) {
	long := "/" + strings.Repeat("x", 120) + ".sock"
	cases := []struct {
		name string
		eps  []runnerstate.Endpoint
		want string
	}{
		{"none", nil, "no Endpoints"},
		{"unknown network", []runnerstate.Endpoint{{Network: "udp", Address: ":1"}}, `network "udp"`},
		{"path over sun_path", unixEndpoint(long), "over the"},
		{"no address", unixEndpoint(""), "no Address"},
		{"bad tcp", []runnerstate.Endpoint{{Network: "tcp", Address: "nope"}}, "host:port"},
		{"twice", append(unixEndpoint("a.sock"), unixEndpoint("a.sock")...), "given twice"},
		{"port over 65535", []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:99999"}}, "port"},
		{"negative port", []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:-1"}}, "port"},
		{"unknown service", []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:no-such-service"}}, "port"},
		{"not a local address", []runnerstate.Endpoint{{Network: "tcp", Address: "192.0.2.1:0"}}, "not an address of this machine"},
		{"ipv6 on tcp4", []runnerstate.Endpoint{{Network: "tcp4", Address: "[::1]:0"}}, "not an IPv4 address"},
		{"ipv4 on tcp6", []runnerstate.Endpoint{{Network: "tcp6", Address: "127.0.0.1:0"}}, "not an IPv6 address"},
		{"unknown host", []runnerstate.Endpoint{{Network: "tcp", Address: "no-such-host.invalid:0"}}, "no-such-host.invalid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(testharness.TempDir(t), "d")
			_, err := Listen(background(t), dir, Options{Endpoints: c.eps})
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			_, err = os.Stat(dir)
			assert.ErrorIs(t, err, os.ErrNotExist, "nothing created")
		})
	}
	_, err := Listen(background(t), testharness.TempDir(t), Options{Endpoints: unixEndpoint("a.sock"), Mode: "later"})
	assert.ErrorIs(t, err, runnerstate.ErrBadMode)
}

// A server over TCP on any platform: Listen, Ready, Dial finds it, and Stop
// returns once it has let the directory go.
func TestListenDialStopOverTCP(t *testing.T) {
	dir := testharness.TempDir(t)
	srv, err := Listen(background(t), dir, Options{Program: "echo", Version: "v1.0.0",
		Endpoints: []runnerstate.Endpoint{{Network: "tcp", Address: "127.0.0.1:0"}}})
	require.NoError(t, err)
	go func() {
		for {
			c, err := srv.Listeners()[0].Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	require.NoError(t, srv.Ready(nil))
	c, rec, err := Dial(background(t), dir, nil, DialOptions{Program: "echo", Version: "v1.0.0"})
	require.NoError(t, err)
	c.Close()
	assert.Equal(t, os.Getpid(), rec.PID)
	_, port, _ := net.SplitHostPort(rec.Endpoints[0].Address)
	assert.NotEqual(t, "0", port, "the port picked is published")

	go func() { <-srv.Leaving(); srv.Close() }()
	require.NoError(t, Stop(background(t), dir, ""))
	assert.Equal(t, runnerstate.RestartDrain, srv.Reason())
	_, held, err := runnerstate.Running(dir)
	require.NoError(t, err)
	assert.False(t, held)
	_, _, err = Dial(background(t), dir, nil, DialOptions{})
	assert.ErrorIs(t, err, ErrNotRunning)
}

// Versions compare as semantic versions, a missing "v" added; what does not
// parse compares with nothing.
func TestOlder(t *testing.T) {
	cases := []struct {
		have, want string
		older      bool
	}{
		{"v1.0.0", "v1.1.0", true},
		{"1.0.0", "v1.1.0", true},
		{"v1.2.0", "1.1.9", false},
		{"v1.1.0", "v1.1.0", false},
		{"v1.1.0-rc.1", "v1.1.0", true},
		{"", "v1.0.0", false},
		{"v1.0.0", "", false},
		{"dev", "v1.0.0", false},
		{"v1.0.0", "latest", false},
	}
	for _, c := range cases {
		assert.Equal(t, c.older, older(c.have, c.want), "%q older than %q", c.have, c.want)
	}
}
