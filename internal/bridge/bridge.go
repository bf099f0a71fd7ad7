// Package bridge carries what the root package lends the cluster module
// (module github.com/runnerstate/runnerstate/etcd, which may import this
// package as part of the same project) without making it public API. The
// root package sets each hook when it is initialised; nothing here imports
// the root.
package bridge

// PublishStarting writes rec, a runnerstate.Record, as dir's runner.json
// for this process's hold of dir, with Ready false: the record a runner has
// at admission, before its own first Publish. The cluster module writes a
// leader's local record with it when the leadership is taken, so that
// runnerstate.Start and Status wait for the leader's own Publish. Its
// errors are runnerstate.Publish's. Set by the root package.
var PublishStarting func(dir string, rec any) error

// MarkLeaving marks this process's hold of dir as going, for why (a
// restart mode, runnerstate.RestartLost, "idle" or "closed"): its
// runner.json says Ready false and Leaving why from then on, written only
// while it names this process and never after the hold's release, and a
// later Publish keeps the mark. It writes the mark even after the hold lost
// its lock file, when Publish refuses. Errors: one naming dir when this
// process does not hold it. Set by the root package; package daemon uses it.
var MarkLeaving func(dir, why string) error
