// Package version orders the build versions runners and starters say of
// themselves (runnerstate.Record.Version, TakeoverOptions.Version): as
// semantic versions (golang.org/x/mod/semver), with a leading "v" added when
// it is missing. A version that is empty or not semver compares with
// nothing. The root package asks it whether a yielding starter steps aside
// (program.go), and package daemon whether a server is older than its
// client: one order for both.
package version

import (
	"strings"

	"golang.org/x/mod/semver"
)

// Compare is semver.Compare of a and b (-1, 0 or +1 as a is older than,
// the same as, or newer than b), and ok false when either is not a version.
func Compare(a, b string) (cmp int, ok bool) {
	ca, cb := canonical(a), canonical(b)
	if ca == "" || cb == "" {
		return 0, false
	}
	return semver.Compare(ca, cb), true
}

// Older reports whether have is older than want; false when either cannot
// be compared.
func Older(have, want string) bool {
	cmp, ok := Compare(have, want)
	return ok && cmp < 0
}

// canonical is v as semver takes it, or "" when it is not a version.
func canonical(v string) string {
	if v == "" {
		return ""
	}
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	if !semver.IsValid(v) {
		return ""
	}
	return v
}
