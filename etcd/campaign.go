package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/runnerstate/runnerstate"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Campaign waits its turn to lead key, as a standby, and returns the
// *Leadership once admitted. It never disturbs a leader: it is admitted when
// the key is free (the leader released it, or its lease expired about one TTL
// after it died or was cut off from etcd), no Takeover starter is waiting, and no older
// standby is. Standbys are admitted in the order they came (Status's
// Standby); a standby killed with -9 keeps its place until its lease
// expires. When the leader's key vanishes before its lease could have
// expired (etcd revoked it early: a stale raft leader), and not by Release
// or by force, the next admission waits one TTL, past that leader's own
// deadline, with a warning. A standby whose lease runs out while it waits (etcd unreachable
// for a TTL) registers again, at the back.
//
// With o.Dir set, it first waits with runnerstate.Standby while a local
// runner holds the directory (or a local Takeover starter is being admitted
// to it), then takes it with runnerstate.Acquire, and only then campaigns on
// the cluster; the local lock is held until Release. The leadership lasts
// until Release or Lost, whatever happens to ctx, which bounds only the wait.
//
// While no etcd member answers it keeps waiting (etcd may come back), and
// logs a warning after a few seconds (3 s, or half the safe window when
// that is longer). The standby's lease is renewed while it waits, and it is
// renewed once more before admission when under half a TTL is left.
//
// Errors: runnerstate.ErrBadMode (wrapped) for a bad o.Mode; an error for a
// bad key or SafetyMargin; a *BusyError naming the leader, wrapping ctx's
// error, when ctx ends first (or the core's *runnerstate.BusyError while
// waiting for Dir); when ctx ends and no member answered during those last
// few seconds, an error wrapping ctx's error that names the endpoints and
// says etcd could not be reached (not runnerstate.ErrBusy); etcd's error,
// wrapped, when etcd refuses.
func Campaign(ctx context.Context, cli *clientv3.Client, key string, o Options) (*Leadership, error) {
	a, err := newCandidacy(cli, key, o, false)
	if err != nil {
		return nil, err
	}
	return a.lead(ctx, standbyLocal)
}

// Takeover takes key over for this process, as a deploy does, and returns
// the *Leadership once admitted:
//
//   - No leader: admitted at once (after the TTL of a leader removed by force
//     just before, see below).
//   - A leader: a restart request (o.Mode) is left for it, which its
//     Restart channel delivers; after o.Grace, counted on this process's
//     monotonic clock from the start of the cluster part (after Dir's), never
//     on a time another host wrote, the request is upgraded to "now"; after
//     o.KillAfter more, unless o.NoForce, the leader is removed by force: its
//     key is deleted and its lease revoked. A removed leader that is cut off
//     from etcd cannot hear it, so admission then waits the removed leader's
//     granted TTL, by which time its own deadline has closed its Lost.
//   - Concurrent starters: the newest (by etcd's revision order) wins; an
//     older one returns ErrSuperseded as soon as a newer one registers.
//     Waiting starters show in Status's Waiting and Campaign standbys give
//     way to them.
//
// With o.Dir set, it first takes the directory with runnerstate.Takeover
// (Mode, Grace, KillAfter, NoForce as NoSignal), then the cluster; the local
// lock is held until Release. When ctx ends first, the starter withdraws
// its waiting mark, and its own restart request when no other starter waits.
// An unreachable etcd is waited for, and warned about, as Campaign does.
//
// Errors: runnerstate.ErrBadMode (wrapped) for a bad o.Mode; ErrSuperseded;
// a *BusyError naming the leader, wrapping ctx's error, when ctx ends first;
// the unreachable error Campaign gives when no member answered during the
// last few seconds; an error when this starter's own lease runs out while
// it waits; the core's errors for Dir; etcd's error, wrapped, when etcd
// refuses.
func Takeover(ctx context.Context, cli *clientv3.Client, key string, o Options) (*Leadership, error) {
	a, err := newCandidacy(cli, key, o, true)
	if err != nil {
		return nil, err
	}
	return a.lead(ctx, takeLocal)
}

// lead takes Dir with local first when it is set, then the cluster; a
// cluster failure releases Dir again.
func (a *candidacy) lead(ctx context.Context, local func(context.Context, Options) (func(), error)) (*Leadership, error) {
	var release func()
	if a.o.Dir != "" {
		var err error
		if release, err = local(ctx, a.o); err != nil {
			return nil, err
		}
	}
	l, err := a.run(ctx)
	if err != nil {
		if release != nil {
			release()
		}
		return nil, err
	}
	l.start(release)
	return l, nil
}

// takeLocal takes o.Dir over with the core's Takeover.
func takeLocal(ctx context.Context, o Options) (func(), error) {
	return runnerstate.Takeover(ctx, o.Dir, runnerstate.TakeoverOptions{
		Mode: o.Mode, Grace: o.Grace, KillAfter: o.KillAfter, NoSignal: o.NoForce, Logger: o.Logger,
	})
}

// standbyLocal waits while a local runner holds o.Dir, then acquires it.
func standbyLocal(ctx context.Context, o Options) (func(), error) {
	for {
		if _, err := runnerstate.Standby(ctx, o.Dir, runnerstate.StandbyOptions{Logger: o.Logger}); err != nil {
			return nil, err
		}
		release, err := runnerstate.Acquire(o.Dir)
		if err == nil {
			return release, nil
		}
		if !errors.Is(err, runnerstate.ErrBusy) {
			return nil, err
		}
		// Another local process took it between the two: stand by again.
	}
}

// candidacy is one Campaign or Takeover call.
type candidacy struct {
	cli      *clientv3.Client
	k        keys
	o        Options
	log      *slog.Logger
	takeover bool
	self     runnerstate.Identity
	start    time.Time // the grace clock, monotonic: set when the cluster part starts

	ls   *lease
	mark string // this candidacy's key under K/standby/ or K/waiting/

	asked       int64     // mod revision of the restart request this starter wrote, or 0
	forcedRev   int64     // mod revision of the K/forced seen, or 0
	forcedUntil time.Time // admission waits until then

	heard  contact // when etcd last answered this candidacy
	warned bool    // the silence was logged

	// The leader last seen, and the earliest its lease could expire by
	// etcd's own answer (TimeToLive), to tell a lease revoked before its
	// time (an etcd older than 3.5.13, or a stale raft leader resumed from
	// a pause) from one that ran out or was released.
	seenToken  int64
	seenLease  int64
	seenExpiry time.Time // zero: not asked yet
	probedAt   time.Time
	earlyUntil time.Time // admission waits until then
	released   int64     // the token the last K/released seen named
}

func newCandidacy(cli *clientv3.Client, key string, o Options, takeover bool) (*candidacy, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	k, err := keysOf(key)
	if err != nil {
		return nil, err
	}
	if cli == nil {
		return nil, errorf("key %s: nil client", key)
	}
	if o.TTL < DefaultTTL {
		o.Logger.Warn("runnerstate/etcd: TTL under the default: an etcd leader election can outlast the leader's safe window and cost it its leadership (with etcd's default heartbeat of 100 ms and election timeout of 1000 ms an election takes 1 to 2 s, 2 to 4 s with a split vote)",
			"key", key, "ttl", o.TTL, "default", DefaultTTL)
	}
	return &candidacy{cli: cli, k: k, o: o, log: o.Logger, takeover: takeover, self: runnerstate.Self()}, nil
}

// quiet is how long without an answer from etcd makes it unreachable for
// this candidacy: a few seconds, and at least two keepalive intervals.
func (a *candidacy) quiet() time.Duration {
	return max(unreachableAfter, (a.o.TTL-a.o.SafetyMargin)/2)
}

// ended is the error when ctx ended before admission: etcd unreachable when
// no member answered during the last quiet, else a *BusyError naming the
// leader last seen.
func (a *candidacy) ended(ctx context.Context, last view) error {
	if d, ok := a.heard.silent(); !ok || d >= a.quiet() {
		return unreachable(a.cli, a.k.leader, a.quiet(), ok, context.Cause(ctx))
	}
	return &BusyError{Key: a.k.leader, Holder: holderOf(last.leader), err: ctx.Err()}
}

// noteSilence logs, once per silence, that etcd has not answered for quiet.
func (a *candidacy) noteSilence() {
	d, ok := a.heard.silent()
	switch {
	case ok && d < a.quiet():
		a.warned = false
	case !a.warned && (!ok && time.Since(a.start) >= a.quiet() || ok):
		a.warned = true
		if !ok {
			d = time.Since(a.start)
		}
		a.log.Warn("runnerstate/etcd: no etcd member has answered; still waiting, since etcd may come back: check the endpoints and that etcd runs there",
			"key", a.k.leader, "endpoints", strings.Join(a.cli.Endpoints(), ","), "silent", d.Round(time.Millisecond), "answered_before", ok)
	}
}

// run registers and waits, registering again when a standby's lease runs
// out.
func (a *candidacy) run(ctx context.Context) (*Leadership, error) {
	a.start = time.Now() // after Dir's local takeover: the cluster's own grace
	for {
		if err := a.register(ctx); err != nil {
			a.withdraw(false)
			return nil, err
		}
		l, err := a.wait(ctx)
		if err == nil {
			return l, nil
		}
		if errors.Is(err, errLeaseLost) && !a.takeover && ctx.Err() == nil {
			a.log.Warn("runnerstate/etcd: the standby's lease ran out while it waited; registering again", "key", a.k.leader)
			continue
		}
		a.withdraw(errors.Is(err, ErrSuperseded))
		return nil, err
	}
}

// register grants this candidacy's lease and puts its mark, retrying while
// etcd is unreachable.
func (a *candidacy) register(ctx context.Context) error {
	prefix := a.k.standby
	if a.takeover {
		prefix = a.k.waiting
	}
	id, _ := json.Marshal(a.self)
	for {
		err := a.tryRegister(ctx, prefix, string(id))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return a.ended(ctx, view{})
		}
		if errors.Is(err, errRegisterAgain) {
			continue
		}
		if !transient(err) {
			return errorf("key %s: register: %w", a.k.leader, err)
		}
		a.noteSilence()
		if err := pause(ctx, retryRenew); err != nil {
			return a.ended(ctx, view{})
		}
	}
}

func (a *candidacy) tryRegister(ctx context.Context, prefix, id string) error {
	opCtx, cancel := context.WithTimeout(ctx, a.quiet())
	defer cancel()
	if a.ls == nil || a.ls.cause() != nil {
		if a.ls != nil {
			a.ls.stop()
		}
		ls, err := grantLease(opCtx, a.cli, a.o.TTL, a.o.SafetyMargin, &a.heard)
		if err != nil {
			return err
		}
		a.ls = ls
		a.mark = fmt.Sprintf("%s%016x", prefix, int64(ls.id))
		checkVersion(opCtx, a.cli, a.log)
	}
	_, err := a.cli.Put(opCtx, a.mark, id, clientv3.WithLease(a.ls.id))
	if err == nil {
		a.heard.hear()
	}
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		a.ls.expire(errLeaseGone) // gone since the grant: the next try grants again
		return errRegisterAgain
	}
	return err
}

// withdraw ends a failed candidacy: its lease is revoked, which removes its
// mark, and a restart request it left is taken back unless another starter
// waits or it was superseded (the newer starter wants the same).
func (a *candidacy) withdraw(superseded bool) {
	if a.ls == nil {
		return
	}
	a.ls.revoke()
	if a.asked == 0 || superseded {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.o.TTL)
	defer cancel()
	_, _ = a.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(a.k.restart), "=", a.asked),
		clientv3.Compare(clientv3.CreateRevision(a.k.waiting), "=", 0).WithPrefix(),
	).Then(clientv3.OpDelete(a.k.restart)).Commit()
}

// wait is the candidacy's loop: read the key's state in one read, act on it,
// sleep until etcd says something changed or a clock step is due.
func (a *candidacy) wait(ctx context.Context) (*Leadership, error) {
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	var events clientv3.WatchChan
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var last view
	for {
		if a.ls.cause() != nil {
			return nil, errorf("key %s: %w", a.k.leader, errLeaseLost)
		}
		l, wake, err := a.look(ctx, &last, &events, wctx)
		switch {
		case l != nil:
			return l, nil
		case ctx.Err() != nil:
			return nil, a.ended(ctx, last)
		case err != nil && !transient(err):
			return nil, err
		case err != nil:
			a.noteSilence()
			wake = time.Now().Add(retryRenew)
		}
		var due <-chan time.Time
		if !wake.IsZero() {
			timer.Reset(time.Until(wake))
			due = timer.C
		}
		select {
		case <-ctx.Done():
		case <-a.ls.lost:
		case wr, ok := <-events:
			for _, ev := range wr.Events {
				if string(ev.Kv.Key) == a.k.released && ev.Type == mvccpb.PUT {
					a.released = releasedBy(ev.Kv) // seen before the deletion that follows it
				}
			}
			if !ok || wr.Err() != nil {
				events = nil // watched again after the next read
				_ = pause(ctx, retryRenew)
			}
		case <-due:
		}
		timer.Stop()
	}
}

// look reads the state once and takes the step it calls for. It returns the
// leadership once admitted, or when to look again at the latest (zero: when
// etcd says something changed).
func (a *candidacy) look(ctx context.Context, last *view, events *clientv3.WatchChan, wctx context.Context) (*Leadership, time.Time, error) {
	opCtx, cancel := context.WithTimeout(ctx, a.quiet())
	defer cancel()
	v, err := readView(opCtx, a.cli, a.k)
	if err != nil {
		return nil, time.Time{}, err
	}
	a.heard.hear()
	*last = v
	if *events == nil {
		*events = a.cli.Watch(wctx, a.k.leader, clientv3.WithRange(a.k.end), clientv3.WithRev(v.rev+1))
	}
	marks := v.standby
	if a.takeover {
		marks = v.waiting
	}
	var mine *mvccpb.KeyValue
	for _, kv := range marks {
		if string(kv.Key) == a.mark {
			mine = kv
		}
	}
	if mine == nil {
		// The mark went with its lease (expired, or revoked by etcd):
		// register again on a new one, keeping what this candidacy saw.
		a.ls.expire(errLeaseGone)
		return nil, time.Time{}, errorf("key %s: %w", a.k.leader, errLeaseLost)
	}
	if a.takeover && marks[len(marks)-1] != mine {
		newer := identities(marks[len(marks)-1:])[0]
		a.log.Info("runnerstate/etcd: a newer starter came; stepping aside", "key", a.k.leader, "newer", newer.String())
		return nil, time.Time{}, fmt.Errorf("%w: key %s, by %s", ErrSuperseded, a.k.leader, newer)
	}
	now := time.Now()
	if v.forced != nil && v.forced.ModRevision != a.forcedRev {
		// A leader was removed by force. It may be cut off and not know
		// yet: nobody is admitted before its TTL has passed since (this
		// read is after the removal, so counting from now is safe).
		var f forcedRemoval
		_ = json.Unmarshal(v.forced.Value, &f)
		a.forcedRev = v.forced.ModRevision
		a.forcedUntil = now.Add(max(time.Duration(f.TTL)*time.Second, a.o.TTL))
	}
	probe := a.notice(opCtx, v, now)
	if v.leader != nil {
		if !a.takeover {
			return nil, probe, nil // a standby waits for the leader to go
		}
		wake, err := a.escalate(opCtx, v, now)
		if probe.Before(wake) || wake.IsZero() {
			wake = probe
		}
		return nil, wake, err
	}
	if now.Before(a.earlyUntil) {
		return nil, a.earlyUntil, nil
	}
	if !a.takeover && (len(v.waiting) > 0 || v.standby[0] != mine) {
		return nil, time.Time{}, nil // a starter, or an older standby, goes first
	}
	if v.forced != nil && now.Before(a.forcedUntil) {
		return nil, a.forcedUntil, nil
	}
	// Never admitted with under half a TTL of lease left: renew first.
	if a.ls.left() < a.o.TTL/2 {
		if err := a.ls.refresh(opCtx); err != nil || a.ls.left() < a.o.TTL/2 {
			if a.ls.cause() != nil {
				return nil, time.Time{}, errorf("key %s: %w", a.k.leader, errLeaseLost)
			}
			return nil, now.Add(retryRenew), nil
		}
	}
	l, err := a.admit(opCtx, v, mine)
	return l, time.Time{}, err
}

// notice follows the leader v shows. While one leads, it asks etcd, every
// quarter of a TTL, when that leader's lease can expire at the earliest.
// When the key is gone before then, and not by Release (no K/released with
// its token) nor by force (K/forced), etcd revoked a live lease: its leader
// may not have stopped (its own deadline is ahead), so admission waits one
// TTL from now, by which time that deadline has passed. It returns when
// the next look is due for the next question (zero: none due).
func (a *candidacy) notice(ctx context.Context, v view, now time.Time) time.Time {
	if v.release != nil {
		a.released = releasedBy(v.release)
	}
	if v.leader == nil {
		if a.seenToken != 0 && a.released != a.seenToken && v.forced == nil &&
			!a.seenExpiry.IsZero() && now.Before(a.seenExpiry.Add(-retryRenew)) {
			a.earlyUntil = now.Add(a.o.TTL)
			a.log.Warn("runnerstate/etcd: the leader's lease was revoked before its time, by etcd itself (an etcd older than 3.5.13, or a stale raft leader resumed from a pause): waiting one TTL before admission, since that leader may still be at work",
				"key", a.k.leader, "token", a.seenToken, "lease_expiry_in", a.seenExpiry.Sub(now).Round(time.Millisecond), "wait", a.o.TTL)
		}
		a.seenToken, a.seenExpiry = 0, time.Time{}
		return time.Time{}
	}
	if v.leader.CreateRevision != a.seenToken {
		a.seenToken, a.seenLease, a.seenExpiry, a.probedAt = v.leader.CreateRevision, v.leader.Lease, time.Time{}, time.Time{}
		defer func() {
			a.log.Debug("runnerstate/etcd: following the leader's lease", "key", a.k.leader, "token", a.seenToken,
				"lease_expiry_in", a.seenExpiry.Sub(now).Round(time.Millisecond))
		}()
	}
	every := a.o.TTL / 4
	if now.Sub(a.probedAt) < every {
		return a.probedAt.Add(every)
	}
	a.probedAt = now
	pctx, cancel := context.WithTimeout(ctx, a.ls.perTry)
	defer cancel()
	resp, err := a.cli.TimeToLive(pctx, clientv3.LeaseID(a.seenLease))
	if err == nil && resp.TTL > 0 {
		// The answer is in whole seconds, rounded down, counted from when
		// etcd read it, after now: a lower bound of the expiry.
		if at := now.Add(time.Duration(resp.TTL) * time.Second); at.After(a.seenExpiry) {
			a.seenExpiry = at
		}
	}
	return now.Add(every)
}

// admit tries to create the leader key in one Txn that also checks, at the
// same revision, that the turn is this candidacy's.
func (a *candidacy) admit(ctx context.Context, v view, mine *mvccpb.KeyValue) (*Leadership, error) {
	admitted := time.Now()
	rec := a.o.Record
	self := runnerstate.Self()
	rec.PID, rec.Process = self.PID, self
	if rec.StartedAt.IsZero() {
		rec.StartedAt = admitted
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return nil, errorf("key %s: record: %w", a.k.leader, err)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(a.k.leader), "=", 0)}
	if a.takeover {
		// No starter newer than this one ("<=" is spelled "< n+1": the
		// client has no "<=").
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(a.k.waiting), "<", mine.CreateRevision+1).WithPrefix())
	} else {
		// No starter waiting, and no standby older than this one.
		cmps = append(cmps,
			clientv3.Compare(clientv3.CreateRevision(a.k.waiting), "=", 0).WithPrefix(),
			clientv3.Compare(clientv3.CreateRevision(a.k.standby), ">", mine.CreateRevision-1).WithPrefix())
	}
	ops := []clientv3.Op{
		clientv3.OpPut(a.k.leader, string(data), clientv3.WithLease(a.ls.id)),
		clientv3.OpDelete(a.mark),
		clientv3.OpDelete(a.k.restart),
		clientv3.OpDelete(a.k.released),
	}
	if v.forced != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(a.k.forced), "=", v.forced.ModRevision))
		ops = append(ops, clientv3.OpDelete(a.k.forced))
	} else {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(a.k.forced), "=", 0))
	}
	resp, err := a.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		a.ls.expire(errLeaseGone)
		return nil, errorf("key %s: %w", a.k.leader, errLeaseLost)
	}
	if err != nil || !resp.Succeeded {
		return nil, err // another won the race: look again
	}
	l := &Leadership{
		cli: a.cli, k: a.k, o: a.o, log: a.log, ls: a.ls,
		token: resp.Header.Revision, rec: rec, admittedAt: admitted, from: resp.Header.Revision + 1, modRev: resp.Header.Revision,
	}
	a.ls = nil // the leadership owns it now
	a.heard.hear()
	l.ls.lead() // from here its deadline is enforced
	a.log.Info("runnerstate/etcd: admitted", "key", a.k.leader, "token", l.token, "lease", int64(l.ls.id))
	return l, nil
}

// escalate is a starter's step while a leader holds the key: ask, upgrade
// to "now" after Grace, remove by force after KillAfter more. It returns
// when the next step is due.
func (a *candidacy) escalate(ctx context.Context, v view, now time.Time) (time.Time, error) {
	token := v.leader.CreateRevision
	graceEnd := a.start.Add(a.o.Grace)
	forceAt := graceEnd.Add(a.o.KillAfter)
	want := a.o.Mode
	if !now.Before(graceEnd) {
		want = runnerstate.RestartNow
	}
	if runnerstate.ModeStrength(pendingFor(v.restart, token)) < runnerstate.ModeStrength(want) {
		if err := a.ask(ctx, v, want); err != nil {
			return time.Time{}, err
		}
	}
	switch {
	case now.Before(graceEnd):
		return graceEnd, nil
	case a.o.NoForce:
		return time.Time{}, nil
	case now.Before(forceAt):
		return forceAt, nil
	}
	return time.Time{}, a.force(ctx, v)
}

// ask leaves a restart request of mode for the leader in v, on the leader's
// lease, so that it goes with that leader and is never read by the next.
func (a *candidacy) ask(ctx context.Context, v view, mode string) error {
	data, _ := json.Marshal(restartRequest{Mode: mode, RequestedAt: time.Now().UTC().Format(time.RFC3339Nano), By: a.self, For: v.leader.CreateRevision})
	resp, err := putRequest(ctx, a.cli, a.k, v, string(data))
	if err != nil || !resp.Succeeded {
		return err
	}
	a.asked = resp.Header.Revision
	a.log.Info("runnerstate/etcd: asked the leader to restart", "key", a.k.leader, "mode", mode, "leader", holderName(holderOf(v.leader)))
	return nil
}

// putRequest writes a request over the one v saw, only while v's leader
// still leads.
func putRequest(ctx context.Context, cli *clientv3.Client, k keys, v view, data string) (*clientv3.TxnResponse, error) {
	same := clientv3.Compare(clientv3.CreateRevision(k.restart), "=", 0)
	if v.restart != nil {
		same = clientv3.Compare(clientv3.ModRevision(k.restart), "=", v.restart.ModRevision)
	}
	return cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(k.leader), "=", v.leader.CreateRevision), same,
	).Then(clientv3.OpPut(k.restart, data, clientv3.WithLease(clientv3.LeaseID(v.leader.Lease)))).Commit()
}

// force removes v's leader: its key is deleted and a K/forced mark put in
// the same Txn (so no admission can miss it), then its lease is revoked.
func (a *candidacy) force(ctx context.Context, v view) error {
	victim := clientv3.LeaseID(v.leader.Lease)
	ttl := int64(a.o.TTL / time.Second)
	if resp, err := a.cli.TimeToLive(ctx, victim); err != nil {
		return err
	} else if resp.GrantedTTL > ttl {
		ttl = resp.GrantedTTL
	}
	data, _ := json.Marshal(forcedRemoval{Token: v.leader.CreateRevision, TTL: ttl, By: a.self})
	resp, err := a.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(a.k.leader), "=", v.leader.CreateRevision),
	).Then(
		clientv3.OpDelete(a.k.leader), clientv3.OpDelete(a.k.restart), clientv3.OpPut(a.k.forced, string(data)),
	).Commit()
	if err != nil || !resp.Succeeded {
		return err
	}
	a.log.Warn("runnerstate/etcd: removed the leader by force", "key", a.k.leader, "leader", holderName(holderOf(v.leader)), "ttl", ttl)
	if _, err := a.cli.Revoke(ctx, victim); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		a.log.Warn("runnerstate/etcd: could not revoke the removed leader's lease; it expires by itself", "key", a.k.leader, "err", err)
	}
	return nil
}

// pause sleeps d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
