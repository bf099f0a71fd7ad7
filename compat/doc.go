// Package compat is the compatibility test of the runner directory
// protocol (docs/protocol.md) against real builds of earlier releases:
// examples/runner and examples/runnerctl built from each commit in
// releases (compat_linux_test.go), out of the clone's own history, played
// against the same programs built from the current code, both ways, and,
// for releases with package daemon (v0.4 on), a server of that package
// built from each side (linger_linux_test.go). It has no code of its
// own; run it with
//
//	RUNNERSTATE_COMPAT=1 go test -v -run TestCompat ./compat
//
// Without RUNNERSTATE_COMPAT=1 the test is skipped (it builds three trees,
// which takes a minute on a cold cache).
package compat
