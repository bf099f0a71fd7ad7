package runnerstate

import (
	"unicode/utf8"
)

// checkName refuses a directory name that is not valid UTF-8, before
// anything is created in it: runner.json and the socket addresses derived
// from it are JSON, which would store such a name lossily, so that a client
// reads back another path than the one the runner took (one another user
// may have made). The name is quoted (%q) so that its bytes show.
func checkName(op, dir string) error {
	if !utf8.ValidString(dir) {
		return errorf("%s: the directory name %q is not valid UTF-8, and runner.json would store another path than this one; rename the directory, or name it by a path that is valid UTF-8", op, dir)
	}
	return nil
}

// checkEndpoints refuses a record whose endpoint addresses are not valid
// UTF-8: what is stored must be exactly what was bound (see checkName).
func checkEndpoints(dir string, eps []Endpoint) error {
	for i, ep := range eps {
		if !utf8.ValidString(ep.Address) {
			return errorf("Publish %s: endpoint %d's address %q is not valid UTF-8, and runner.json would store another address than the one bound; give one that is", dir, i, ep.Address)
		}
	}
	return nil
}
