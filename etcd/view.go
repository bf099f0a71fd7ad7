package etcd

import (
	"context"
	"encoding/json"
	"time"

	"github.com/runnerstate/runnerstate"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// view is one consistent read of everything under a leader key, at one
// revision.
type view struct {
	rev     int64
	leader  *mvccpb.KeyValue   // nil: no leader
	forced  *mvccpb.KeyValue   // nil: no forced removal pending
	release *mvccpb.KeyValue   // nil: no Release mark
	restart *mvccpb.KeyValue   // nil: no request
	waiting []*mvccpb.KeyValue // Takeover starters, oldest first
	standby []*mvccpb.KeyValue // Campaign waiters, oldest first
}

// readView reads the key's state in one read-only Txn: one revision, one
// round trip.
// readHedge is how long a read waits for an answer before it is sent
// again, to the next member.
const readHedge = 300 * time.Millisecond

func readView(ctx context.Context, cli *clientv3.Client, k keys) (view, error) {
	byCreate := clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)
	// A read is safe to repeat: hedged, so that a frozen member delays it
	// by readHedge, not by all of ctx.
	resp, err := hedge(ctx, readHedge, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return cli.Txn(ctx).Then(
			clientv3.OpGet(k.leader),
			clientv3.OpGet(k.forced),
			clientv3.OpGet(k.restart),
			clientv3.OpGet(k.waiting, clientv3.WithPrefix(), byCreate),
			clientv3.OpGet(k.standby, clientv3.WithPrefix(), byCreate),
			clientv3.OpGet(k.released),
		).Commit()
	})
	if err != nil {
		return view{}, err
	}
	first := func(i int) *mvccpb.KeyValue {
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
			return kvs[0]
		}
		return nil
	}
	return view{
		rev:     resp.Header.Revision,
		leader:  first(0),
		forced:  first(1),
		restart: first(2),
		waiting: resp.Responses[3].GetResponseRange().Kvs,
		standby: resp.Responses[4].GetResponseRange().Kvs,
		release: first(5),
	}, nil
}

// holderOf is the Holder a leader key's value names; the zero Holder for nil.
// An unparsable value still gives the token and lease.
func holderOf(kv *mvccpb.KeyValue) Holder {
	if kv == nil {
		return Holder{}
	}
	h := Holder{Token: kv.CreateRevision, Lease: kv.Lease}
	_ = json.Unmarshal(kv.Value, &h.Record)
	return h
}

// identities are the Identities the marks carry, in the marks' order; an
// unparsable mark is listed with what could be read (nothing).
func identities(kvs []*mvccpb.KeyValue) []runnerstate.Identity {
	ids := make([]runnerstate.Identity, 0, len(kvs))
	for _, kv := range kvs {
		var id runnerstate.Identity
		_ = json.Unmarshal(kv.Value, &id)
		ids = append(ids, id)
	}
	return ids
}

// restartRequest is the value of K/restart.
type restartRequest struct {
	Mode        string               `json:"mode"`
	RequestedAt string               `json:"requested_at"` // RFC 3339, informational only: never compared
	By          runnerstate.Identity `json:"by"`
	For         int64                `json:"for"` // the token of the leader it is addressed to
}

// pendingFor is the mode of kv's request when it is addressed to token, or "".
func pendingFor(kv *mvccpb.KeyValue, token int64) string {
	if kv == nil || token == 0 {
		return ""
	}
	var r restartRequest
	if json.Unmarshal(kv.Value, &r) != nil || r.For != token || runnerstate.ModeStrength(r.Mode) == 0 {
		return ""
	}
	return r.Mode
}

// releasedBy is the token K/released names, or 0.
func releasedBy(kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return 0
	}
	var r struct {
		Token int64 `json:"token"`
	}
	_ = json.Unmarshal(kv.Value, &r)
	return r.Token
}

// forcedRemoval is the value of K/forced.
type forcedRemoval struct {
	Token int64                `json:"token"` // the leader removed
	TTL   int64                `json:"ttl"`   // its granted TTL, seconds
	By    runnerstate.Identity `json:"by"`
}
