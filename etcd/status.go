package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/runnerstate/runnerstate"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Holder is a key's leader as etcd has it.
//
// Trust: Token and Lease are etcd's own (the key's create revision and
// lease) and exact. Record is what the leader published: its PID and Process
// were filled in by the leader's process, and name a process on another
// machine that this one cannot verify; read them as a hint, never signal
// them.
type Holder struct {
	Record runnerstate.Record `json:"record,omitzero"`
	Token  int64              `json:"token"`
	Lease  int64              `json:"lease"`
}

// Running reports key's leader: the Holder and true while one holds it, the
// zero Holder and false when none does. It is one read and changes nothing.
//
// Errors: an error for a bad key; when no member answered before ctx ended,
// an error naming the endpoints that says etcd could not be reached (not
// runnerstate.ErrBusy); etcd's error, wrapped, naming the key.
func Running(ctx context.Context, cli *clientv3.Client, key string) (Holder, bool, error) {
	k, err := keysOf(key)
	if err != nil {
		return Holder{}, false, err
	}
	resp, err := hedge(ctx, readHedge, func(ctx context.Context) (*clientv3.GetResponse, error) { return cli.Get(ctx, k.leader) })
	if err != nil {
		return Holder{}, false, callError(cli, key, "", err)
	}
	if len(resp.Kvs) == 0 {
		return Holder{}, false, nil
	}
	return holderOf(resp.Kvs[0]), true, nil
}

// Report is everything an operator needs about a key, from Status. Scripts
// parse its JSON; the field names are stable. Lists are [] when empty.
type Report struct {
	Key      string                 `json:"key"`
	Held     bool                   `json:"held"`
	Holder   Holder                 `json:"holder,omitzero"`
	Restart  string                 `json:"restart"`  // the pending mode addressed to the holder, or ""
	Waiting  []runnerstate.Identity `json:"waiting"`  // Takeover starters, newest last
	Standby  []runnerstate.Identity `json:"standby"`  // Campaign waiters, in admission order
	Revision int64                  `json:"revision"` // the etcd revision the report was read at
}

// Status reports key's state in one consistent read (one revision): the
// leader, the restart request pending for it, the Takeover starters waiting
// (live ones: each is on its starter's lease, so one killed with -9 stays
// listed until that lease expires, at most a TTL) and the Campaign standbys.
// It changes nothing.
//
// Errors: as Running's.
func Status(ctx context.Context, cli *clientv3.Client, key string) (Report, error) {
	k, err := keysOf(key)
	if err != nil {
		return Report{}, err
	}
	v, err := readView(ctx, cli, k)
	if err != nil {
		return Report{}, callError(cli, key, "status: ", err)
	}
	r := Report{
		Key:      key,
		Held:     v.leader != nil,
		Holder:   holderOf(v.leader),
		Waiting:  identities(v.waiting),
		Standby:  identities(v.standby),
		Revision: v.rev,
	}
	if v.leader != nil {
		r.Restart = pendingFor(v.restart, v.leader.CreateRevision)
	}
	return r, nil
}

// Observe delivers key's leader: the current one first (the zero Holder when
// none), then every change: a new leader, a Publish, none. Delivery waits for
// the receiver; a change made while it is away is still delivered, in order.
// When etcd cannot be reached it retries, and delivers the state it finds
// when it can again if that changed. The channel is closed when ctx ends.
func Observe(ctx context.Context, cli *clientv3.Client, key string) <-chan Holder {
	ch := make(chan Holder)
	go func() {
		defer close(ch)
		k, err := keysOf(key)
		if err != nil {
			return
		}
		send := func(h Holder) bool {
			select {
			case ch <- h:
				return true
			case <-ctx.Done():
				return false
			}
		}
		last := int64(-1) // mod revision of the state delivered; 0 for none
		for ctx.Err() == nil {
			resp, err := cli.Get(ctx, k.leader)
			if err != nil {
				if pause(ctx, retryRenew) != nil {
					return
				}
				continue
			}
			var kv *mvccpb.KeyValue
			rev := int64(0)
			if len(resp.Kvs) > 0 {
				kv, rev = resp.Kvs[0], resp.Kvs[0].ModRevision
			}
			if rev != last {
				if !send(holderOf(kv)) {
					return
				}
				last = rev
			}
			wch := cli.Watch(clientv3.WithRequireLeader(ctx), k.leader, clientv3.WithRev(resp.Header.Revision+1))
			for wr := range wch {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					h := Holder{}
					last = 0
					if ev.Type != mvccpb.DELETE {
						h, last = holderOf(ev.Kv), ev.Kv.ModRevision
					}
					if !send(h) {
						return
					}
				}
			}
			if pause(ctx, retryRenew) != nil {
				return
			}
		}
	}()
	return ch
}

// RequestRestart asks key's current leader to restart: mode is
// runnerstate.RestartDrain or runnerstate.RestartNow, and the leader sees it
// on its Restart channel. The request is addressed to that leader and kept
// on its lease, so it goes with it: with no leader it returns nil and keeps
// nothing for a later one. It never weakens a pending request ("now" stays
// "now"; "now" upgrades "drain"). It does not wait for the leader to act.
//
// Errors: runnerstate.ErrBadMode (wrapped) for any other mode; an error for a
// bad key; otherwise as Running's.
func RequestRestart(ctx context.Context, cli *clientv3.Client, key, mode string) error {
	if runnerstate.ModeStrength(mode) == 0 {
		return fmt.Errorf("%w, not %q", runnerstate.ErrBadMode, mode)
	}
	k, err := keysOf(key)
	if err != nil {
		return err
	}
	self := runnerstate.Self()
	for {
		v, err := readView(ctx, cli, k)
		if err != nil {
			return callError(cli, key, "restart: ", err)
		}
		if v.leader == nil || runnerstate.ModeStrength(pendingFor(v.restart, v.leader.CreateRevision)) >= runnerstate.ModeStrength(mode) {
			return nil
		}
		data, _ := json.Marshal(restartRequest{Mode: mode, RequestedAt: time.Now().UTC().Format(time.RFC3339Nano), By: self, For: v.leader.CreateRevision})
		resp, err := putRequest(ctx, cli, k, v, string(data))
		if err != nil {
			return callError(cli, key, "restart: ", err)
		}
		if resp.Succeeded {
			return nil
		}
		// The leader or the request changed under it: look again.
	}
}
