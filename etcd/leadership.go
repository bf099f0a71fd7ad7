package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/runnerstate/runnerstate"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Leadership is one admission to lead a key, from Campaign or Takeover until
// Release or Lost. Its methods are safe for concurrent use.
//
// Trust: Lost is this process's own verdict, made in time: it closes before
// etcd can admit anyone else. Only writes made with Fence are excluded
// across machines; see the package documentation.
type Leadership struct {
	cli        *clientv3.Client
	k          keys
	o          Options
	log        *slog.Logger
	ls         *lease
	token      int64
	admittedAt time.Time
	from       int64 // the revision the watch starts at

	mu       sync.Mutex
	rec      runnerstate.Record
	modRev   int64  // the leader key's mod revision after this leadership's last write
	reqMode  string // the latest request addressed to this leadership
	reqRev   int64  // its mod revision
	reqMoved chan struct{}

	restart chan string
	local   func()
	once    sync.Once
	cleaned chan struct{}
	wg      sync.WaitGroup
}

// start runs the leadership's goroutines: the watch of its key, the restart
// delivery, and the clean-up when it ends.
func (l *Leadership) start(local func()) {
	l.local = local
	l.reqMoved = make(chan struct{}, 1)
	l.restart = make(chan string)
	l.cleaned = make(chan struct{})
	var localRestart <-chan string
	if l.o.Dir != "" {
		localRestart = runnerstate.WatchRestart(l.ls.ctx, l.o.Dir)
		// Ready false until the leader's own Publish, as a runner's record
		// at admission (runnerstate.Start waits for it).
		if err := runnerstate.PublishNotReady(l.o.Dir, l.rec); err != nil {
			l.log.Warn("runnerstate/etcd: could not publish the record in the local directory", "dir", l.o.Dir, "err", err)
		}
	}
	l.wg.Add(2)
	go l.watch()
	go l.deliver(localRestart)
	go l.cleanup()
}

// Token is the fencing token of this leadership: the leader key's create
// revision in etcd. Tokens are strictly increasing across leaders of a key
// (etcd's revision only grows), so a store outside etcd that keeps the
// highest token it has seen and refuses lower ones refuses a deposed leader.
func (l *Leadership) Token() int64 { return l.token }

// Fence is the compare to put in every write Txn the leader makes on etcd:
// the Txn fails once another leader exists or the key is gone, whatever this
// process believes. Trust: this is the only exclusion that holds across a
// pause (SIGSTOP, GC, VM freeze) or a partition.
func (l *Leadership) Fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.k.leader), "=", l.token)
}

// Lease is the lease the leader key is attached to, for keys the leader
// wants gone with it. It is revoked at Release.
func (l *Leadership) Lease() clientv3.LeaseID { return l.ls.id }

// Lost is closed at the first of: this process's own safe deadline (the send
// time of its last acknowledged keepalive + the granted TTL − SafetyMargin),
// the leader key deleted or replaced, the lease gone, or Release. The
// deadline is decided on this process's own clock (one that counts a
// suspend: CLOCK_BOOTTIME on Linux), so Lost closes at least SafetyMargin
// before etcd could expire the lease and admit another leader, even when
// etcd cannot be reached. A lost leadership never renews its lease again,
// and does not revoke it either: the lease runs out by itself, so nobody is
// admitted before it has, unless Release (the work has stopped) revokes it.
//
// A channel is closed by a goroutine, and after a pause (SIGSTOP, a GC, a
// frozen VM) the work may run before that goroutine does: check Valid, not
// Lost, before each action.
func (l *Leadership) Lost() <-chan struct{} { return l.ls.lost }

// Valid reports whether this leadership still holds, decided at the call:
// true only while this process's clock (one that counts a suspend) is
// before the safe deadline and nothing has closed Lost. When it finds the
// deadline passed it closes Lost itself, so Lost, Err and Context agree with
// it from then on.
//
// Call it before each action of the leader's own, fenced or not (a file
// written, a mail sent, a job started): a leader paused past its deadline
// gets false from its first call after it resumes, however the goroutines
// are scheduled. A pause between the check and the action cannot be
// prevented by any check: that is what Fence, and Token in a store outside
// etcd, are for.
func (l *Leadership) Valid() bool { return l.ls.valid() }

// Context is a context that ends with Lost: hand it to the work. Its Done
// is closed by a goroutine, as Lost is: check Valid before each action.
func (l *Leadership) Context() context.Context { return l.ls.ctx }

// Err is why the leadership was lost (a Release included), or nil while it
// holds; it agrees with Valid, decided at the call as Valid is.
func (l *Leadership) Err() error {
	l.ls.valid()
	if why := l.ls.cause(); why != nil {
		return errorf("key %s, token %d: %w", l.k.leader, l.token, why)
	}
	return nil
}

// Restart delivers the restart requests addressed to this leadership
// (RequestRestart, Takeover): each new or stronger mode once, the strongest
// pending when the receiver comes back. With Options.Dir set it also
// delivers the local directory's requests (runnerstate.WatchRestart). It
// returns the same channel on every call, closed at Lost.
func (l *Leadership) Restart() <-chan string { return l.restart }

// Publish replaces the leader's record on the leader key, fenced: PID and
// Process are filled in with this process's identity, StartedAt with the
// admission time when zero, and Ready is set (the record written at
// admission, on the key and in Dir, has Ready false). With Options.Dir set it also publishes rec in
// the directory's runner.json (runnerstate.Publish). It checks Valid first,
// and again before each try. Tries go through the package's own
// connection to each member (dialled with the client's own settings; the
// client is not changed), the member that answered first, and are hedged:
// while none has answered, another is sent to the next member every quarter
// of SafetyMargin (150 to 500 ms), so one frozen member delays it by about
// that much, not by all of ctx; a try that arrives late never puts an
// older record over a newer one. ctx bounds the whole.
//
// Errors: an error wrapping runnerstate.ErrNotHolder once Valid is false, or
// when the fence fails (another leader exists, or the key is gone); then
// nothing is written, so it never overwrites another leader's record.
// Otherwise etcd's error, wrapped, or the core's Publish error for Dir.
func (l *Leadership) Publish(ctx context.Context, rec runnerstate.Record) error {
	if err := l.notHolder(); err != nil {
		return err
	}
	self := runnerstate.Self()
	rec.PID, rec.Process, rec.Ready = self.PID, self, true
	if rec.StartedAt.IsZero() {
		rec.StartedAt = l.admittedAt
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return errorf("key %s: publish: %w", l.k.leader, err)
	}
	l.mu.Lock()
	prev := l.modRev
	l.mu.Unlock()
	for {
		// The put is fenced, and also conditional on the record this
		// leadership last wrote: a try that arrives late (held by a
		// frozen member) can never put an older record over a newer one.
		// Tries are hedged: one on a frozen member costs a fraction of
		// the margin, not the call.
		resp, err := hedgeOn(ctx, l.ls.conns, l.ls.perTry, func(ctx context.Context, p *memberConn) (*clientv3.TxnResponse, error) {
			if err := l.notHolder(); err != nil {
				return nil, err
			}
			return p.kv.Txn(ctx).If(l.Fence(), clientv3.Compare(clientv3.ModRevision(l.k.leader), "=", prev)).Then(
				clientv3.OpPut(l.k.leader, string(data), clientv3.WithLease(l.ls.id)),
			).Else(clientv3.OpGet(l.k.leader)).Commit()
		})
		if err := l.notHolder(); err != nil {
			return err
		}
		if err != nil {
			return errorf("key %s: publish: %w", l.k.leader, err)
		}
		if resp.Succeeded {
			prev = resp.Header.Revision
			break
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].CreateRevision != l.token {
			l.ls.expire(errKeyGone)
			return l.notHolder()
		}
		prev = kvs[0].ModRevision
		if string(kvs[0].Value) == string(data) {
			break // an earlier try of this call put it
		}
		// Another Publish of this leadership's came between: go on top.
	}
	l.mu.Lock()
	l.modRev = max(l.modRev, prev)
	l.mu.Unlock()
	l.mu.Lock()
	l.rec = rec
	l.mu.Unlock()
	if l.o.Dir != "" {
		return runnerstate.Publish(l.o.Dir, rec)
	}
	return nil
}

// notHolder is the ErrNotHolder error once lost, or nil.
func (l *Leadership) notHolder() error {
	l.ls.valid()
	if why := l.ls.cause(); why != nil {
		return fmt.Errorf("runnerstate/etcd: key %s, token %d: the leadership is lost (%v): %w", l.k.leader, l.token, why, runnerstate.ErrNotHolder)
	}
	return nil
}

// Release ends the leadership: Lost closes, the leader key is deleted,
// fenced (never a later leader's), with a mark that says the end was a
// Release, so the waiters admit the next at once; then the lease is revoked
// (which removes the mark and the rest on it), then Dir's local lock is
// released. Call it once
// the leader's work has stopped (after Lost too: the README's pattern
// ends the work through Context, then its deferred Release runs): the revoke
// lets a successor in at once, where Lost alone leaves the lease to run
// out. It returns within about one TTL even when etcd cannot be reached (the
// lease then expires by itself). Idempotent and safe for concurrent use;
// every leadership must be released, or it renews its lease for as long as
// the process lives and nobody else is admitted.
func (l *Leadership) Release() {
	l.once.Do(func() {
		l.ls.expire(errReleased)
		<-l.cleaned
		l.wg.Wait()
		l.markReleased()
		l.ls.revoke()
		if l.local != nil {
			l.local()
		}
	})
}

// markReleased deletes the leader key, fenced, and puts K/released with this
// token, on this leadership's lease, in the same Txn (the revoke right after
// removes it): the waiters, who see it, read the end as cooperative and
// admit at once, where a key that vanishes before its lease's time makes
// them wait a TTL (see candidacy.notice). Bounded by one TTL; no answer
// leaves the revoke, then the lease's expiry, to end it.
func (l *Leadership) markReleased() {
	ctx, cancel := context.WithTimeout(context.Background(), l.ls.ttl())
	defer cancel()
	data, _ := json.Marshal(struct {
		Token int64 `json:"token"`
	}{l.token})
	_, _ = hedge(ctx, l.ls.perTry, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return l.cli.Txn(ctx).If(l.Fence()).Then(
			clientv3.OpDelete(l.k.leader), clientv3.OpDelete(l.k.restart), clientv3.OpPut(l.k.released, string(data), clientv3.WithLease(l.ls.id)),
		).Commit()
	})
}

// cleanup waits for the leadership's end (Lost), says why, and stops the renewals. It does not
// revoke: only Release, called once the work has stopped, does.
func (l *Leadership) cleanup() {
	defer close(l.cleaned)
	<-l.ls.lost
	if why := l.ls.cause(); why != errReleased {
		l.log.Warn("runnerstate/etcd: leadership lost", "key", l.k.leader, "token", l.token, "why", why.Error())
	}
	l.ls.stop()
}

// watch follows the leader key and the restart request from the admission
// on: the key deleted or replaced ends the leadership; a request addressed to this
// leadership is handed to deliver.
func (l *Leadership) watch() {
	defer l.wg.Done()
	ctx := clientv3.WithRequireLeader(l.ls.ctx)
	from := l.from
	for ctx.Err() == nil {
		wch := l.cli.Watch(ctx, l.k.leader, clientv3.WithRange(l.k.restart+"\x00"), clientv3.WithRev(from))
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				l.apply(ev.Kv, ev.Type == mvccpb.DELETE)
			}
			from = wr.Header.Revision + 1
		}
		// The watch ended: etcd has no raft leader, the history was
		// compacted, or the client closed. Read the state and watch again.
		if pause(ctx, retryRenew) != nil {
			return
		}
		resp, err := l.cli.Txn(ctx).Then(clientv3.OpGet(l.k.leader), clientv3.OpGet(l.k.restart)).Commit()
		if err != nil {
			continue
		}
		leader := resp.Responses[0].GetResponseRange().Kvs
		if len(leader) == 0 {
			l.ls.expire(errKeyGone)
			return
		}
		l.apply(leader[0], false)
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			l.apply(kvs[0], false)
		}
		from = resp.Header.Revision + 1
	}
}

// apply takes in one state of the leader key or the restart request.
func (l *Leadership) apply(kv *mvccpb.KeyValue, deleted bool) {
	switch string(kv.Key) {
	case l.k.leader:
		if deleted || kv.CreateRevision != l.token {
			l.ls.expire(errKeyGone)
		}
	case l.k.restart:
		if deleted {
			return
		}
		mode := pendingFor(kv, l.token)
		if mode == "" {
			return
		}
		l.mu.Lock()
		if kv.ModRevision > l.reqRev {
			l.reqMode, l.reqRev = mode, kv.ModRevision
		}
		l.mu.Unlock()
		select {
		case l.reqMoved <- struct{}{}:
		default:
		}
	}
}

// deliver hands the requests to the Restart channel's receiver, and closes
// it when the leadership ends.
func (l *Leadership) deliver(local <-chan string) {
	defer l.wg.Done()
	defer close(l.restart)
	var sent int64
	for {
		select {
		case <-l.ls.lost:
			return
		default:
		}
		l.mu.Lock()
		mode, rev := l.reqMode, l.reqRev
		l.mu.Unlock()
		var out chan string
		if rev != sent {
			out = l.restart
		}
		select {
		case <-l.ls.lost:
			return
		case <-l.reqMoved:
		case m, ok := <-local:
			if !ok {
				local = nil
				continue
			}
			select {
			case l.restart <- m:
			case <-l.ls.lost:
				return
			}
		case out <- mode:
			sent = rev
		}
	}
}
