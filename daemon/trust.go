package daemon

import (
	"fmt"
	"unicode/utf8"
)

// checkNames refuses a directory name or an endpoint address that is not
// valid UTF-8, before anything is taken, bound or dialled: runner.json is
// JSON, which would store either lossily, so that a client would dial
// another address than the one bound (one another user may have made). The
// name is quoted (%q) so that its bytes show.
func checkNames(op, dir string, addrs ...string) error {
	if !utf8.ValidString(dir) {
		return fmt.Errorf("daemon: %s: the directory name %q is not valid UTF-8, and runner.json would store another path than this one; rename the directory, or name it by a path that is valid UTF-8", op, dir)
	}
	for _, a := range addrs {
		if !utf8.ValidString(a) {
			return fmt.Errorf("daemon: %s %s: the endpoint address %q is not valid UTF-8, and runner.json would store another address than the one bound; give one that is", op, dir, a)
		}
	}
	return nil
}
