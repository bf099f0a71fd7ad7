package runnerstate

import (
	"fmt"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/runnerstate/runnerstate/internal/gate"
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

// aheadOf reports whether a state file's date t is more than a minute
// (gate.MaxAhead) after now: no writer of this machine's clock wrote it, so
// the entry or request it dates binds nobody (a forged gate.json entry or
// restart.json dated 2099 made every server step aside or leave).
func aheadOf(t time.Time) bool { return gate.Ahead(t, time.Now()) }

// voidWarnings are Status's lines for what binds nobody because it is dated
// ahead: the gate's starters, and the restart request.
func voidWarnings(dir string) []string {
	var out []string
	now := time.Now()
	g, _ := readGate(dir)
	for _, e := range g.Waiting {
		if e.Void(now) {
			out = append(out, fmt.Sprintf("%s names a waiting starter (pid %d) dated %s, more than %v ahead: it is void and binds nobody (no server waits for it or steps aside)",
				filepath.Join(dir, gateName), e.Starter.PID, e.Since.Format(time.RFC3339), gate.MaxAhead))
		}
	}
	if req, ok := readRestart(dir); ok && aheadOf(req.RequestedAt) {
		out = append(out, fmt.Sprintf("%s asks %q, dated %s, more than %v ahead: it is void and binds nobody (no runner leaves for it); a new request writes over it",
			filepath.Join(dir, RestartName), req.Mode, req.RequestedAt.Format(time.RFC3339), gate.MaxAhead))
	}
	return out
}
