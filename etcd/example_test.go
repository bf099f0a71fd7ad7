package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/runnerstate/runnerstate/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// exampleEtcd starts a one-member etcd on loopback for the examples and
// connects to it; a real program connects to its cluster instead. stop
// closes the client and the etcd.
func exampleEtcd() (cli *clientv3.Client, stop func()) {
	dir, err := os.MkdirTemp("", "runnerstate-etcd-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	loop, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*loop}, []url.URL{*loop}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*loop}, []url.URL{*loop}
	cfg.InitialCluster = cfg.Name + "=" + loop.String()
	cfg.Logger, cfg.ZapLoggerBuilder = "zap", embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.TickMs, cfg.ElectionMs = 10, 100
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatal(err)
	}
	<-e.Server.ReadyNotify()
	cli, err = clientv3.New(clientv3.Config{Endpoints: []string{e.Clients[0].Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	return cli, func() {
		_ = cli.Close()
		e.Close()
		_ = os.RemoveAll(dir)
	}
}

// A standby waits its turn, then does its work with fenced writes: etcd
// applies them only while this leadership holds the key.
func ExampleCampaign() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()

	l, err := etcd.Campaign(ctx, cli, "/myapp/runner", etcd.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := cli.Txn(l.Context()).If(l.Fence()).Then(clientv3.OpPut("/myapp/state", "step 1")).Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("while leading, the fenced write is applied:", resp.Succeeded)

	l.Release()
	resp, err = cli.Txn(ctx).If(l.Fence()).Then(clientv3.OpPut("/myapp/state", "late")).Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the leadership ends, it is rejected:", !resp.Succeeded)
	// Output:
	// while leading, the fenced write is applied: true
	// after the leadership ends, it is rejected: true
}

// store is an external store that fences by token: it keeps the highest
// token it has seen and rejects lower ones.
type store struct {
	mu      sync.Mutex
	highest int64
	data    []string
}

var errStale = errors.New("stale leader")

func (s *store) write(token int64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return errStale
	}
	s.highest = token
	s.data = append(s.data, v)
	return nil
}

// A store outside etcd fences with the token: every leader's token is higher
// than its predecessor's, so a deposed leader writing late is refused.
func ExampleLeadership_Token() {
	cli, stop := exampleEtcd()
	defer stop()
	ctx := context.Background()
	var s store

	old, err := etcd.Campaign(ctx, cli, "/myapp/runner", etcd.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("old leader writes:", s.write(old.Token(), "a"))
	old.Release() // or it paused, and its lease expired

	next, err := etcd.Campaign(ctx, cli, "/myapp/runner", etcd.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release()
	fmt.Println("new leader writes:", s.write(next.Token(), "b"))
	fmt.Println("old leader writes late:", s.write(old.Token(), "c"))
	// Output:
	// old leader writes: <nil>
	// new leader writes: <nil>
	// old leader writes late: stale leader
}

// The leader checks Valid before each action of its own, fenced or not: it
// is decided at the call, so a leader resumed after a pause past its
// deadline gets false at once, even before Lost is closed. The work ends
// through Context, then the deferred Release revokes the lease.
func ExampleLeadership_Valid() {
	cli, stop := exampleEtcd()
	defer stop()
	l, err := etcd.Campaign(context.Background(), cli, "/myapp/runner", etcd.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release()
	for job := 1; job <= 3 && l.Context().Err() == nil; job++ {
		if !l.Valid() {
			fmt.Println("lost:", l.Err())
			return
		}
		fmt.Println("job", job, "done") // the action: a file, a mail, a fenced write
	}
	// Output:
	// job 1 done
	// job 2 done
	// job 3 done
}
