package etcd

import (
	"context"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// wait bounds every wait for something that must happen: generous, since
// the machine is shared, and reached only when something is broken.
const wait = 30 * time.Second

// testTTL is the lease TTL the tests use: the smallest the package allows.
const testTTL = 2 * time.Second

// server is an etcd started in the test process, on loopback, in a
// temporary directory, with no logging.
type server struct {
	e     *embed.Etcd
	addr  string
	close sync.Once // embed.Etcd.Close panics when called twice
}

// startEtcd starts an etcd for one test; it is stopped when the test ends.
// Heartbeats are 10 ms so that the single member elects itself at once.
func startEtcd(t testing.TB) *server {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	loop, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls = []url.URL{*loop}
	cfg.AdvertiseClientUrls = []url.URL{*loop}
	cfg.ListenPeerUrls = []url.URL{*loop}
	cfg.AdvertisePeerUrls = []url.URL{*loop}
	cfg.InitialCluster = cfg.Name + "=" + loop.String()
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.TickMs, cfg.ElectionMs = 10, 100
	e, err := embed.StartEtcd(cfg)
	require.NoError(t, err)
	s := &server{e: e, addr: e.Clients[0].Addr().String()}
	t.Cleanup(s.stop)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(wait):
		t.Fatal("etcd did not become ready")
	}
	return s
}

func (s *server) stop() { s.close.Do(s.e.Close) }

// client connects to addr; it is closed when the test ends.
func client(t testing.TB, addr string) *clientv3.Client {
	t.Helper()
	cli, err := newClient(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// newClient connects to addr: one endpoint, or several separated by commas.
func newClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(addr, ","),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// proxy is a TCP proxy to etcd that the test can cut: while cut, it
// accepts and reads but holds every byte, both ways, and delivers them all
// when healed, late, as a congested or partitioned network does.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	healed chan struct{} // closed while the proxy passes bytes
	closed chan struct{}
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// startProxy starts a proxy to target on loopback; it is closed when the
// test ends.
func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target, healed: make(chan struct{}), closed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.healed)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// cut starts holding bytes.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
		p.healed = make(chan struct{})
	default:
	}
}

// heal delivers what was held and passes bytes again.
func (p *proxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.healed:
	default:
		close(p.healed)
	}
}

// pass waits until bytes may pass; false when the proxy closed.
func (p *proxy) pass() bool {
	p.mu.Lock()
	healed := p.healed
	p.mu.Unlock()
	select {
	case <-healed:
		return true
	case <-p.closed:
		return false
	}
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF or closed: closing both ends tells the other side
		}
	}
}

func (p *proxy) close() {
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		return
	default:
	}
	close(p.closed)
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

// ctxT is a context bounded by wait, ended when the test ends.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}
