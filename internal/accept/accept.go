// Package accept asks a caller's Accept func (runnerstate.StartOptions,
// daemon.DialOptions) at most once per distinct record: a call that looks
// at the same runner.json again and again while it waits asks once, and
// asks again only when the record changed. The root package's Start and
// package daemon's Dial share it, so that both keep one rule.
package accept

import "encoding/json"

// Once is fn (nil: accept all) asked at most once per distinct value:
// values are the same when their JSON encodings are (for a record: the
// holder's identity and the content). A value that cannot be encoded is
// asked each time. The func returned is for one goroutine: a Start or
// Dial call asks from its own.
func Once[T any](fn func(T) bool) func(T) bool {
	if fn == nil {
		return func(T) bool { return true }
	}
	answers := map[string]bool{}
	return func(v T) bool {
		key, err := json.Marshal(v)
		if err != nil {
			return fn(v)
		}
		ok, asked := answers[string(key)]
		if !asked {
			ok = fn(v)
			answers[string(key)] = ok
		}
		return ok
	}
}
