// Package etcd extends runnerstate's single-runner semantics across
// machines: the same daemon runs on several hosts, and exactly one of them
// is the leader of a key, the active runner for shared work. It is built on
// etcd's own primitives, a lease and a compare-and-swap Txn on one leader
// key, never on consensus of its own.
//
// A deploy calls Takeover (ask the leader to restart, upgrade to "now" after
// Grace, remove it by force after KillAfter; the newest starter wins); a
// standby calls Campaign (wait its turn, never disturb the leader). Both
// return a *Leadership: its Token, its Fence, its Lost channel, the restart
// requests addressed to it, Publish and Release. Running, Status, Observe and
// RequestRestart are for operators and for the other hosts.
//
// # What is promised, and what is not
//
// Exclusion across machines holds for fenced writes only. A write Txn made
// with the leader's Fence() is applied only while that leader's key is still
// the leader key, so once another leader exists every write of the old one
// is rejected, however late it arrives. Lost() closes on the leader's own
// clock before etcd can admit anyone else (by SafetyMargin or more), so a
// leader that watches Lost() and stops has stopped before its successor
// starts, even when cut off from etcd.
//
// Unfenced work can overlap. A leader process that is paused (SIGSTOP, a
// long GC, a frozen VM) cannot watch anything: when it resumes, the lease may
// have expired and another leader be at work, and whatever it does before it
// looks at Lost() (a file written, a mail sent, a write to another store
// without a token check) happens beside the new leader. Only a fenced etcd
// write, or a store that checks the token, rejects it.
//
// A store outside etcd uses the token: the leader sends Token() with every
// write, and the store keeps the highest token it has seen and rejects any
// lower one. Tokens (the leader key's create revision) strictly increase
// from one leader to the next, so a deposed leader's token is always lower:
//
//	// in the store, for each write, atomically:
//	if w.Token < highest {
//		return ErrStaleLeader // a leader that lost, writing late
//	}
//	highest = w.Token
//	apply(w)
//
// A leader that dies is replaced after about one TTL (the lease expires). A
// leader removed by force is replaced no sooner than its TTL after the
// removal. A leadership that is never released keeps its lease alive for as
// long as its process lives: always call Release.
//
// # Keys
//
// Under a leader key K (such as /myapp/runner) the package uses K itself (the
// leader's record, on its lease), K/restart (the request for the leader, on
// the leader's lease), K/forced (a forced removal whose TTL has not yet been
// waited), K/waiting/ and K/standby/ (the starters and standbys, each on its
// own lease). Nothing else under K is touched.
package etcd
