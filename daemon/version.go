package daemon

import (
	"strings"

	"github.com/runnerstate/runnerstate/internal/bridge"
	"golang.org/x/mod/semver"
)

// Versions compare as semantic versions (golang.org/x/mod/semver), with a
// leading "v" added when it is missing. A version that is empty or not
// semver compares with nothing: such a server is never replaced for its
// version, and never yields.

func init() {
	bridge.Newer = func(a, b string) bool { return older(b, a) }
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
	h, w := canonical(have), canonical(want)
	return h != "" && w != "" && semver.Compare(h, w) < 0
}
