package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"go.uber.org/goleak"
)

// The daemon tests' roles: real server processes, re-executing the test
// binary. A role reports events on stdout, one line each.

const (
	envServerOptions = "RS_DAEMON_OPTIONS" // the server's Options (JSON, without Logger)
	envServerHold    = "RS_DAEMON_HOLD"    // "1": answer only once the file "answer" exists in dir
)

var roles = testharness.Roles{
	"server": roleServer,
	"http":   roleHTTP,
}

func TestMain(m *testing.M) {
	testharness.RunRole(roles)
	// Every server's goroutines (its watch, its handover, its rendezvous,
	// Start's reaper of the servers Dial started, which Stop ended) are gone
	// by the end.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/runnerstate/runnerstate/internal/dirwatch.read"),
		goleak.IgnoreAnyFunction("github.com/runnerstate/runnerstate/internal/spawn.reap"),
		goleak.IgnoreAnyFunction("github.com/runnerstate/runnerstate/internal/spawn.awaitReady"))
}

// server: Listen with the options in its environment, say "listening
// <inherited>", publish Ready and say "ready", answer each line "ping"
// with "pong <pid> <version>" (a line "slow" waits for the file "answer"
// in dir first), and on Leaving say "leaving <reason>", wait for the
// connections in flight, Close, say "closed"
// and exit 0. Listen's error: "error <err>", exit 3 (superseded: 4).
func roleServer(dir string) int {
	var opts Options
	if s := os.Getenv(envServerOptions); s != "" {
		if err := json.Unmarshal([]byte(s), &opts); err != nil {
			testharness.Say("error %v", err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
	srv, err := Listen(ctx, dir, opts)
	cancel()
	if err != nil {
		testharness.Say("error %v", err)
		if errors.Is(err, runnerstate.ErrSuperseded) {
			return 4
		}
		return 3
	}
	var inflight sync.WaitGroup
	for _, ln := range srv.Listeners() {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					defer c.Close()
					answer(c, dir, opts.Version)
				}()
			}
		}()
	}
	if err := srv.Ready(nil); err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	testharness.Say("ready inherited=%d", srv.inherited)
	<-srv.Leaving()
	testharness.Say("leaving %s", srv.Reason())
	inflight.Wait() // a ping is quick: even "now" answers what it accepted
	srv.Close()
	testharness.Say("closed")
	return 0
}

// http: Listen with the options in its environment and say "listening";
// on the command "ready", publish Ready and say "ready"; then, its accept
// loop late (as on a loaded machine: not before the server leaves), serve
// HTTP ("ok" to every request) as the package doc says, until it leaves
// (saying "leaving <reason>" as Leaving closes); Close, say "closed
// <reason>" and exit 0.
func roleHTTP(dir string) int {
	var opts Options
	if err := json.Unmarshal([]byte(os.Getenv(envServerOptions)), &opts); err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
	defer cancel()
	srv, err := Listen(ctx, dir, opts)
	if err != nil {
		testharness.Say("error %v", err)
		return 3
	}
	defer srv.Close()
	testharness.Say("listening")
	for cmd := range testharness.Commands() {
		if cmd == "ready" {
			break
		}
	}
	if err := srv.Ready(nil); err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	testharness.Say("ready")
	tick := time.NewTicker(time.Millisecond)
	for !srv.isLeaving() && ctx.Err() == nil {
		<-tick.C
	}
	tick.Stop()
	go func() {
		<-srv.Leaving()
		testharness.Say("leaving %s", srv.Reason())
	}()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	if err := ServeHTTP(context.Background(), srv, hs); err != nil {
		testharness.Say("error %v", err)
		return 1
	}
	srv.Close()
	testharness.Say("closed %s", srv.Reason())
	return 0
}

// answer answers c's lines.
func answer(c net.Conn, dir, version string) {
	c.SetDeadline(time.Now().Add(testharness.Wait))
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if sc.Text() == "slow" {
			for deadline := time.Now().Add(testharness.Wait); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if _, err := os.Stat(dir + "/answer"); err == nil {
					break
				}
			}
		}
		fmt.Fprintf(c, "pong %d %s\n", os.Getpid(), version)
	}
}

func unixEndpoint(addr string) []runnerstate.Endpoint {
	return []runnerstate.Endpoint{{Network: "unix", Address: addr}}
}

func background(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testharness.Wait)
	t.Cleanup(cancel)
	return ctx
}
