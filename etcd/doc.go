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
// clock (one that counts a suspend: CLOCK_BOOTTIME on Linux) at least
// SafetyMargin before etcd can admit anyone else, even when cut off from
// etcd: a leadership that ended does not revoke its lease, which runs out by
// itself; only Release, called once the work has stopped, revokes it, so a
// cooperative takeover stays fast.
//
// Check Valid() before each action, fenced or not. It is decided at the
// call, so a leader paused (SIGSTOP, a long GC, a frozen VM) past its
// deadline gets false from its first call after it resumes, while Lost()
// and Context(), closed by a goroutine, may not have closed yet. The
// pattern: hand Context() to the work, check Valid() before each action,
// and let the work stop through Context() before a deferred Release runs.
//
// Unfenced work can still overlap. A pause between the check and the action
// cannot be prevented by any check: the action then runs beside the new
// leader. Only a fenced etcd write, or a store that checks the token,
// rejects it.
//
// One frozen etcd member never costs the leader its leadership while quorum
// holds: the package's keepalives and Publish go through connections of its
// own to each member (dialled with the client's settings, which are not
// changed), the member that answers first; each keepalive is bounded by a
// fraction of the margin and sent again at once to the next member, and
// Publish hedges its tries across members. The
// user's own Txns go through the user's client: bound each with a short
// timeout and send it again (see the module's README for the client
// settings).
//
// An unreachable etcd is waited for, with a warning after a few seconds;
// when the wait ends and no member answered during those seconds, the error
// names the endpoints and says etcd could not be reached, and is not
// runnerstate.ErrBusy.
//
// The guarantee rests on etcd never revoking a lease early; servers older
// than 3.5.13 can (a stale raft leader's lease revoke, upstream etcd issues
// 12528 and 15247), and a warning is logged when the member that answers is
// older; 3.7.3 was seen to as well, when its raft leader was resumed from
// SIGSTOP. As a guard, a waiter asks etcd when the leader's lease can expire
// at the earliest, and when the key vanishes before then, not by Release nor
// by force, it waits one TTL before admission, past the old leader's own
// deadline.
//
// A store outside etcd uses the token: the leader sends Token() with every
// write, and the store keeps the highest token it has seen and rejects any
// lower one. Tokens (the leader key's create revision) strictly increase
// from one leader to the next, so a deposed leader's token is always lower:
//
//	// in the store, for each write, atomically:
//	if w.Token < highest {
//		return ErrStaleLeader // a leader whose leadership ended, writing late
//	}
//	highest = w.Token
//	apply(w)
//
// A leader that dies is replaced after about one TTL (default 10 s, which
// outlasts an etcd leader election with etcd's default settings; see
// Options.TTL) once its lease expires. A
// leader removed by force is replaced no sooner than its TTL after the
// removal. A leadership that is never released keeps its lease alive for as
// long as its process lives: always call Release.
//
// # Keys
//
// Under a leader key K (such as /myapp/runner) the package uses K itself (the
// leader's record, on its lease), K/restart (the request for the leader, on
// the leader's lease), K/forced (a forced removal whose TTL has not yet been
// waited), K/released (a Release, on the releasing leader's lease, for the
// moment between the key's deletion and the revoke), K/waiting/ and K/standby/ (the starters and standbys, each on its
// own lease). Nothing else under K is touched.
package etcd
