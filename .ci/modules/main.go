// Command user is a program outside this repository, built by
// .ci/modules.sh against the modules as a proxy serves them (it is copied
// into an empty module there; no go.mod here makes it part of this one).
//
//	user daemon DIR   the daemon story: Dial starts "user serve DIR", the
//	                  server answers on its socket, Stop asks it to go
//	user etcd DIR     the etcd module's Takeover, against an embedded etcd,
//	                  with DIR as its local directory
//
// It prints one line per step and exits 0, or 1 naming what failed.
package main

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/daemon"
	"github.com/runnerstate/runnerstate/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

const program, version = "user", "1.0.0"

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: user daemon|serve|etcd DIR")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "daemon":
		err = client(ctx, os.Args[2])
	case "serve":
		err = serve(ctx, os.Args[2])
	case "etcd":
		err = takeover(ctx, os.Args[2])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "user:", err)
		cancel()
		os.Exit(1)
	}
}

func client(ctx context.Context, dir string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	conn, rec, err := daemon.Dial(ctx, dir, exec.Command(self, "serve", dir), daemon.DialOptions{Program: program, Version: version})
	if err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil {
		return fmt.Errorf("reading the server's answer: %w", err)
	}
	fmt.Printf("daemon: Dial started the server (pid %d), which answered %q\n", rec.PID, line)
	if err := daemon.Stop(ctx, dir, runnerstate.RestartNow); err != nil {
		return err
	}
	fmt.Println("daemon: Stop: the server let the directory go")
	return nil
}

func serve(ctx context.Context, dir string) error {
	srv, err := daemon.Listen(ctx, dir, daemon.Options{Program: program, Version: version,
		Endpoints: []runnerstate.Endpoint{{Network: "unix", Address: "user.sock"}}})
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := srv.Listeners()[0].Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "hello from pid %d\n", os.Getpid())
			c.Close()
		}
	}()
	if err := srv.Ready(nil); err != nil {
		return err
	}
	<-srv.Leaving()
	return srv.Close()
}

func takeover(ctx context.Context, dir string) error {
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "etcd")
	loop, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*loop}, []url.URL{*loop}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*loop}, []url.URL{*loop}
	cfg.InitialCluster = cfg.Name + "=" + loop.String()
	cfg.Logger, cfg.ZapLoggerBuilder = "zap", embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-ctx.Done():
		return fmt.Errorf("embedded etcd not ready: %w", ctx.Err())
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	l, err := etcd.Takeover(ctx, cli, "/user/runner", etcd.Options{Dir: filepath.Join(dir, "runner")})
	if err != nil {
		return err
	}
	fmt.Printf("etcd: Takeover leads /user/runner with token %d, and holds %s\n", l.Token(), filepath.Join(dir, "runner"))
	l.Release()
	return nil
}
