// Command cluster is the demo of the cluster extension: one runner of shared
// work across "machines" (here, processes on this machine), on etcd.
//
//	cluster                           serve an embedded etcd and lead
//	cluster --endpoints 127.0.0.1:23790   another "machine": take over
//	cluster --standby --endpoints ...     a standby: wait its turn
//	cluster --serve-etcd              only serve the embedded etcd
//	cluster status [--json]           who leads, who waits
//	cluster restart --drain|--now     ask the leader to restart
//	cluster watch                     print every change of leader
//
// A runner does a job every --job (a fenced write of a counter to etcd), and
// steps down when asked (a takeover, or restart): it then stands by, so the
// copy that serves etcd keeps serving it for the others; with --dir, a copy
// that does not serve etcd exits instead, since the copy taking the
// directory over waits for the previous one's exit. Stop a copy with
// Ctrl-C. Only loopback addresses are accepted: this demo talks to this
// machine only. The exit codes are in the usage text (cluster --help).
//
// The embedded etcd keeps its data in --etcd-dir (by default a directory
// of its own per --listen address under the user's cache directory), so
// fencing tokens keep increasing across restarts of the serving copy; with
// --listen on port 0 the address changes each time, and the data goes in a
// temporary directory removed at exit.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/runnerstate/runnerstate"
	rsetcd "github.com/runnerstate/runnerstate/etcd"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	// Ctrl-C (SIGINT) and SIGTERM stop every command; the exit code then
	// says which, 128 + the signal's number, as the runner example's does.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	var got atomic.Value
	go func() {
		if sig, ok := <-sigs; ok {
			got.Store(sig)
			cancel()
		}
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	signal.Stop(sigs)
	if sig, ok := got.Load().(syscall.Signal); ok {
		code = 128 + int(sig) // 130 for SIGINT, 143 for SIGTERM
	}
	cancel()
	os.Exit(code)
}

const usage = `usage: cluster [command] [flags]

commands:
  (none)                 run a runner: with no --endpoints, serve an embedded etcd on --listen too
  status [--json]        show who leads and who waits
  restart --drain|--now  ask the leader to restart
  watch                  print every change of leader
  help                   this text (also --help after any command)

exit codes:
  every command          0 done; 1 an error (etcd could not be reached, or refused);
                         2 bad usage; 130 stopped by Ctrl-C (SIGINT), 143 by SIGTERM
  (none)                 75 busy: the local --dir is held by a runner that could not be taken over
  status                 0 a leader holds the key; 3 none does (as runnerctl status)
`

// printUsage writes the usage text and every flag of each command, with
// its default.
func printUsage(w io.Writer) {
	fmt.Fprint(w, usage)
	for _, cmd := range []string{"", "status", "restart", "watch"} {
		fs, _ := flags(cmd)
		name := "run (no command)"
		if cmd != "" {
			name = cmd
		}
		fmt.Fprintf(w, "\nflags of %s:\n", name)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// defaultListen is where the embedded etcd serves, and where the other
// commands look by default.
const defaultListen = "127.0.0.1:23790"

// Meta is what the demo's runner publishes in its Record.
type Meta struct {
	Name string `json:"name"`
}

// cmdFlags are the values of one command's flags.
type cmdFlags struct {
	endpoints, key     *string
	r                  runOpts
	asJSON, drain, now *bool
}

// flags is the flag set of cmd; false for an unknown command.
func flags(cmd string) (*flag.FlagSet, *cmdFlags) {
	fs := flag.NewFlagSet("cluster "+cmd, flag.ContinueOnError)
	f := &cmdFlags{}
	f.endpoints = fs.String("endpoints", "", "etcd client endpoints, comma-separated, loopback only (default: serve an embedded etcd to run; "+defaultListen+" for the other commands)")
	f.key = fs.String("key", "/runnerstate/demo", "the leader key")
	r := &f.r
	switch cmd {
	case "":
		fs.StringVar(&r.listen, "listen", defaultListen, "where the embedded etcd serves clients (loopback)")
		fs.StringVar(&r.etcdDir, "etcd-dir", "", "the embedded etcd's data directory, kept across restarts so that tokens keep increasing (default: one per --listen address under the user's cache directory; a temporary one, removed at exit, with port 0)")
		fs.BoolVar(&r.serveOnly, "serve-etcd", false, "only serve the embedded etcd; run no runner")
		fs.BoolVar(&r.standby, "standby", false, "campaign as a standby instead of taking over")
		fs.StringVar(&r.name, "name", "", "this machine's name in the record (default host-pid)")
		fs.DurationVar(&r.ttl, "ttl", rsetcd.DefaultTTL, "lease TTL: a dead leader is replaced after about this long (under the default the package warns: an etcd election of a multi-member cluster could outlast it)")
		fs.DurationVar(&r.grace, "grace", rsetcd.DefaultGrace, "takeover: how long the leader has to step down before the request becomes \"now\"")
		fs.DurationVar(&r.killAfter, "kill-after", rsetcd.DefaultKillAfter, "takeover: then how long before the leader is removed by force")
		fs.DurationVar(&r.job, "job", time.Second, "how often the runner does a job")
		fs.StringVar(&r.dir, "dir", "", "a local runner directory to hold too (optional); a copy that steps down for a restart request then exits, unless it serves etcd")
	case "status":
		f.asJSON = fs.Bool("json", false, "print the report as JSON")
	case "restart":
		f.drain = fs.Bool("drain", false, "finish the job at hand, then step down")
		f.now = fs.Bool("now", false, "step down at once")
	case "watch":
	default:
		return nil, nil
	}
	return fs, f
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if cmd == "help" {
		printUsage(stdout)
		return 0
	}
	fs, f := flags(cmd)
	if fs == nil {
		fmt.Fprintf(stderr, "cluster: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	fs.SetOutput(stderr)
	fs.Usage = func() {} // --help prints the whole text below; a bad flag, a hint
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return 0
		}
		fmt.Fprintln(stderr, "cluster: see cluster --help")
		return 2
	}
	endpoints, key, r, asJSON, drain, now := f.endpoints, f.key, f.r, f.asJSON, f.drain, f.now
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cluster: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	eps := splitEndpoints(*endpoints)
	if cmd != "" && len(eps) == 0 {
		eps = []string{defaultListen}
	}
	for _, ep := range append(eps, r.listen) {
		if err := loopback(ep); err != nil && ep != "" {
			fmt.Fprintln(stderr, err)
			return 2
		}
	}
	switch cmd {
	case "":
		r.key, r.endpoints = *key, eps
		return r.run(ctx, stdout, stderr)
	case "restart":
		if *drain == *now {
			fmt.Fprintln(stderr, "cluster restart: give exactly one of --drain and --now")
			return 2
		}
	}
	cli, err := connect(eps)
	if err != nil {
		fmt.Fprintln(stderr, "cluster:", err)
		return 1
	}
	defer func() { _ = cli.Close() }()
	switch cmd {
	case "status":
		return status(ctx, cli, *key, *asJSON, stdout, stderr)
	case "restart":
		mode := runnerstate.RestartNow
		if *drain {
			mode = runnerstate.RestartDrain
		}
		rctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		if err := rsetcd.RequestRestart(rctx, cli, *key, mode); err != nil {
			fail(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "asked the leader of %s to restart (%s)\n", *key, mode)
		return 0
	default: // watch
		for h := range rsetcd.Observe(ctx, cli, *key) {
			fmt.Fprintln(stdout, describe(h))
		}
		return 0
	}
}

// callTimeout bounds status and restart.
const callTimeout = 5 * time.Second

// fail prints err, with the demo's advice when etcd could not be reached.
func fail(stderr io.Writer, err error) {
	fmt.Fprintln(stderr, "cluster:", err)
	if strings.Contains(err.Error(), "etcd could not be reached") {
		fmt.Fprintf(stderr, "cluster: is the demo's etcd running? Start one with: cluster --serve-etcd (it serves on %s), or pass --endpoints of a running one\n", defaultListen)
	}
}

// splitEndpoints splits a comma-separated list, dropping empty entries.
func splitEndpoints(s string) []string {
	var eps []string
	for _, ep := range strings.Split(s, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return eps
}

// loopback refuses an address that is not on this machine's loopback.
func loopback(hostport string) error {
	hp := hostport
	if u, err := url.Parse(hostport); err == nil && u.Host != "" {
		hp = u.Host
	}
	host, _, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("cluster: %q is not host:port (such as %s)", hostport, defaultListen)
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("cluster: %s is not a loopback address; this demo talks to this machine only (use 127.0.0.1)", hostport)
}

// connect makes a client that gives up quickly when etcd is not there.
func connect(eps []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
}

type runOpts struct {
	key, listen, name, dir string
	etcdDir                string
	endpoints              []string
	serveOnly, standby     bool
	ttl, grace, killAfter  time.Duration
	job                    time.Duration
}

func (r runOpts) run(ctx context.Context, stdout, stderr io.Writer) int {
	out := &printer{w: stdout}
	if r.name == "" {
		host, _ := os.Hostname()
		r.name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	out.prefix = "cluster[" + r.name + "]: "
	serving := len(r.endpoints) == 0 // this copy serves the embedded etcd
	if serving {
		addr, stop, err := serveEtcd(r.listen, r.etcdDir)
		if err != nil {
			fmt.Fprintln(stderr, "cluster:", err)
			return 1
		}
		defer stop()
		out.say("serving etcd on %s; another machine joins with: go run ./examples/cluster --endpoints %s", addr, addr)
		r.endpoints = []string{addr}
		if r.serveOnly {
			<-ctx.Done()
			out.say("stopped serving etcd")
			return 0
		}
	} else if r.serveOnly {
		fmt.Fprintln(stderr, "cluster: --serve-etcd serves an etcd of its own; drop --endpoints")
		return 2
	}
	cli, err := connect(r.endpoints)
	if err != nil {
		fmt.Fprintln(stderr, "cluster:", err)
		return 1
	}
	defer func() { _ = cli.Close() }()
	meta, _ := json.Marshal(Meta{Name: r.name})
	o := rsetcd.Options{
		TTL: r.ttl, Grace: r.grace, KillAfter: r.killAfter, Dir: r.dir,
		Record: runnerstate.Record{Meta: meta},
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	standby := r.standby
	for {
		var l *rsetcd.Leadership
		if standby {
			out.say("standing by for %s", r.key)
			l, err = rsetcd.Campaign(ctx, cli, r.key, o)
		} else {
			out.say("taking over %s", r.key)
			l, err = rsetcd.Takeover(ctx, cli, r.key, o)
		}
		switch {
		case ctx.Err() != nil:
			out.say("stopped")
			return 0
		case errors.Is(err, rsetcd.ErrSuperseded):
			out.say("a newer copy is taking over; standing by instead")
			standby = true
			continue
		case errors.Is(err, runnerstate.ErrBusy):
			fmt.Fprintln(stderr, "cluster:", err)
			return runnerstate.ExitBusy
		case err != nil:
			fail(stderr, err)
			return 1
		}
		out.say("leader of %s (fencing token %d)", r.key, l.Token())
		why := work(ctx, cli, l, r, out)
		l.Release()
		out.say("stepped down (%s)", why)
		if ctx.Err() != nil {
			return 0
		}
		if r.dir != "" && !serving && (why == whyNow || why == whyDrained) {
			// A newer copy takes this directory (it waits, up to
			// --kill-after, for this process to exit): go, and let it in
			// at once. A copy that serves etcd stands by instead, for the
			// others' sake.
			out.say("exiting: a newer copy takes %s", r.dir)
			return 0
		}
		standby = true
	}
}

// Why a leadership ended when the leader was asked to restart.
const (
	whyNow     = "asked to restart now"
	whyDrained = "drained"
)

// work does a job every r.job until the leadership ends, and says why it
// ended.
func work(ctx context.Context, cli *clientv3.Client, l *rsetcd.Leadership, r runOpts, out *printer) string {
	tick := time.NewTicker(r.job)
	defer tick.Stop()
	draining := false
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return "interrupted"
		case <-l.Lost():
			return "lost: " + l.Err().Error()
		case mode, ok := <-l.Restart():
			if !ok {
				continue // closed at Lost: the next round says why
			}
			if mode == runnerstate.RestartNow {
				return whyNow
			}
			out.say("asked to drain: finishing the job at hand")
			draining = true
			n--
			continue
		case <-tick.C:
		}
		// The job: a fenced write, which etcd refuses once another leader
		// exists, however late this process is.
		resp, err := cli.Txn(l.Context()).If(l.Fence()).Then(
			clientv3.OpPut(r.key+"/jobs", fmt.Sprintf("job %d by %s (token %d)", n, r.name, l.Token())),
		).Commit()
		switch {
		case err != nil && l.Context().Err() != nil:
			continue // the loss shows on the next round
		case err != nil:
			out.say("job %d failed: %v", n, err)
		case !resp.Succeeded:
			return "a fenced write was refused: another leader exists"
		default:
			out.say("job %d done", n)
		}
		if draining {
			return whyDrained
		}
	}
}

// serveEtcd starts a one-member etcd on listen, its data in dir: by
// default one per listen address under the user's cache directory, kept
// across restarts (fencing tokens keep increasing); a temporary one removed
// when it stops with port 0, whose address changes each time.
func serveEtcd(listen, dir string) (addr string, stop func(), err error) {
	temporary := false
	if dir == "" {
		_, port, _ := net.SplitHostPort(listen)
		base, cerr := os.UserCacheDir()
		if port == "0" || cerr != nil {
			if dir, err = os.MkdirTemp("", "runnerstate-cluster-etcd-"); err != nil {
				return "", nil, err
			}
			temporary = true
		} else {
			dir = filepath.Join(base, "runnerstate", "cluster-etcd", strings.NewReplacer(":", "_", "/", "_").Replace(listen))
		}
	}
	if !temporary {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return "", nil, fmt.Errorf("the embedded etcd's data directory %s: %w (pass another with --etcd-dir)", dir, err)
		}
	}
	cleanup := func() {
		if temporary {
			_ = os.RemoveAll(dir)
		}
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	client, _ := url.Parse("http://" + listen)
	peer, _ := url.Parse("http://127.0.0.1:0")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("serve etcd on %s, data in %s: %w (is another copy serving it? join it with --endpoints %s)", listen, dir, err, listen)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() { // embed.Etcd.Close panics when called twice
			e.Close()
			cleanup()
		})
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, fmt.Errorf("etcd on %s did not start serving within 30s", listen)
	}
	return e.Clients[0].Addr().String(), stop, nil
}

// status prints the key's report, as a table or as JSON.
func status(ctx context.Context, cli *clientv3.Client, key string, asJSON bool, stdout, stderr io.Writer) int {
	sctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	rep, err := rsetcd.Status(sctx, cli, key)
	if err != nil {
		fail(stderr, err)
		return 1
	}
	code := 0 // the LSB status codes, as runnerctl status: 0 a leader, 3 none
	if !rep.Held {
		code = 3
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return code
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s (etcd revision %d)\n", rep.Key, rep.Revision)
	if rep.Held {
		fmt.Fprintf(tw, "leader\t%s\n", describe(rep.Holder))
	} else {
		fmt.Fprintf(tw, "leader\tnone\n")
	}
	restart := rep.Restart
	if restart == "" {
		restart = "none pending"
	}
	fmt.Fprintf(tw, "restart\t%s\n", restart)
	list := func(label string, ids []runnerstate.Identity) {
		if len(ids) == 0 {
			fmt.Fprintf(tw, "%s\tnone\n", label)
		}
		for i, id := range ids {
			fmt.Fprintf(tw, "%s\t%d. %s%s\n", label, i+1, id, onHost(id))
			label = ""
		}
	}
	list("waiting", rep.Waiting)
	list("standby", rep.Standby)
	_ = tw.Flush()
	return code
}

// describe is one line about a holder.
func describe(h rsetcd.Holder) string {
	if h.Token == 0 {
		return "no leader"
	}
	var m Meta
	_ = json.Unmarshal(h.Record.Meta, &m)
	name := ""
	if m.Name != "" {
		name = m.Name + ": "
	}
	since := ""
	if !h.Record.StartedAt.IsZero() {
		since = ", since " + h.Record.StartedAt.Format(time.TimeOnly)
	}
	return fmt.Sprintf("%s%s%s, token %d, lease %x%s", name, h.Record.Process, onHost(h.Record.Process), h.Token, h.Lease, since)
}

func onHost(id runnerstate.Identity) string {
	if id.Hostname == "" {
		return ""
	}
	return " on " + id.Hostname
}

// printer writes the runner's lines, one at a time.
type printer struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

func (p *printer) say(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, p.prefix+format+"\n", args...)
}
