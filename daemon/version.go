package daemon

import (
	"strings"

	"github.com/runnerstate/runnerstate/internal/bridge"
	"golang.org/x/mod/semver"
)

// Versions compare as semantic versions (golang.org/x/mod/semver), with a
// leading "v" added when it is missing. A version that is empty or not
// semver compares with nothing: such a server is never replaced for its
// version, and a copy Dial started never yields to it.

func init() {
	bridge.CompareVersions = compareVersions
}

// compareVersions is semver.Compare of a and b, and false when either is
// not a version.
func compareVersions(a, b string) (int, bool) {
	ca, cb := canonical(a), canonical(b)
	if ca == "" || cb == "" {
		return 0, false
	}
	return semver.Compare(ca, cb), true
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

// older reports whether version have is older than want; false when either
// cannot be compared.
func older(have, want string) bool {
	cmp, ok := compareVersions(have, want)
	return ok && cmp < 0
}
