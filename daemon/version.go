package daemon

import "github.com/runnerstate/runnerstate/internal/version"

// Versions compare as semantic versions (internal/version, the order the
// root package's yielding starter uses too), with a leading "v" added when
// it is missing. A version that is empty or not semver compares with
// nothing: such a server is never replaced for its version, and a copy Dial
// started never yields to it.

// older reports whether version have is older than want; false when either
// cannot be compared.
func older(have, want string) bool { return version.Older(have, want) }
