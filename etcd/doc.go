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
// Exclusion across machines holds for fenced writes only: a Txn made with
// Fence() is applied only while that leadership's key is the leader key, and
// a store outside etcd keeps the highest Token() it has seen. Lost() closes
// at least SafetyMargin before etcd can admit anyone else, on the leader's
// own clock, even when cut off from etcd; Valid(), checked before each
// action, decides the same deadline at the call. Unfenced work can still
// overlap: a pause between the check and the action cannot be prevented.
// Always call Release, once the work has stopped.
//
// What is promised and what is not: docs/cluster.md. The leader's pattern,
// TTL and SafetyMargin, a frozen member, an unreachable etcd, the minimum
// etcd version (3.5.13) and the keys the module uses under the leader key:
// this module's README.md.
package etcd
