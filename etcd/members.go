package etcd

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// members are the package's own connections for its own requests
// (keepalives, Publish): one per endpoint of the user's client, dialled
// with that client's own settings (Client.Dial: its TLS, its auth, its dial
// options), so each request can go to the member that answers. The user's
// client is never reconfigured, and its own requests are not affected.
//
// A member that did not answer in time is tried last until it answers
// again: after one failed try, a frozen member is left alone, where the
// user's client's round robin keeps sending it every third request.
type members struct {
	mu  sync.Mutex
	all []*memberConn
}

// memberConn is one endpoint's connection and its record.
type memberConn struct {
	ep       string
	conn     *grpc.ClientConn // nil: the user's client itself (no endpoint could be dialled)
	kv       clientv3.KV
	lease    clientv3.Lease
	failedAt int64 // now() of its last failure, 0 for none
	okAt     int64 // now() of its last answer
}

// dialMembers dials each endpoint of cli. An endpoint that cannot be dialled
// is left out; with none, the user's client serves.
func dialMembers(cli *clientv3.Client) *members {
	m := &members{}
	for _, ep := range cli.Endpoints() {
		conn, err := cli.Dial(ep)
		if err != nil {
			continue
		}
		m.all = append(m.all, &memberConn{ep: ep, conn: conn,
			kv: clientv3.NewKVFromKVClient(pb.NewKVClient(conn), cli), lease: clientv3.NewLeaseFromLeaseClient(pb.NewLeaseClient(conn), cli, 0)})
	}
	if len(m.all) == 0 {
		m.all = []*memberConn{{ep: "the client's", kv: cli.KV, lease: cli.Lease}}
	}
	return m
}

// order is the members best first: those with no failure since their last
// answer, in the client's order, then the others, the oldest failure first.
func (m *members) order() []*memberConn {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Clone(m.all)
	slices.SortStableFunc(out, func(a, b *memberConn) int {
		ha, hb := a.failedAt <= a.okAt, b.failedAt <= b.okAt
		switch {
		case ha && !hb:
			return -1
		case hb && !ha:
			return 1
		case !ha:
			return cmp.Compare(a.failedAt, b.failedAt)
		}
		return 0
	})
	return out
}

// note records a try's outcome on p: an answer, or no answer in time.
func (m *members) note(p *memberConn, answered bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if answered {
		p.okAt = now()
	} else {
		p.failedAt = now()
	}
}

// close closes the package's connections.
func (m *members) close() {
	for _, p := range m.all {
		if p.conn != nil {
			_ = p.lease.Close()
			_ = p.conn.Close()
		}
	}
}

// hedgeOn makes call on the best member, and on the next one every `every`
// while no try has answered (each member at most once at a time, and
// at most hedgeInFlight at once), and on the next one at once when a
// try fails with a transient error. The first answer that is a success
// or a refusal is returned; the others are cancelled and waited for, and
// those that had not answered within `every` are noted as failed. call must
// be safe to repeat.
func hedgeOn[T any](ctx context.Context, m *members, every time.Duration, call func(context.Context, *memberConn) (T, error)) (T, error) {
	order := m.order()
	busy := map[*memberConn]bool{}
	next := 0
	pick := func() (*memberConn, bool) {
		for range order {
			p := order[next%len(order)]
			next++
			if !busy[p] {
				busy[p] = true
				return p, true
			}
		}
		return nil, false
	}
	ended := func(r hedgeResult[T], how tryEnd) {
		delete(busy, r.p)
		switch {
		case how == tryAnswered:
			m.note(r.p, r.err == nil || !transient(r.err))
		case how == tryFailed:
			m.note(r.p, false)
		case how == tryCancelled && time.Since(r.started) >= every:
			m.note(r.p, false)
		}
	}
	return hedgeRun(ctx, every, pick, call, ended)
}
