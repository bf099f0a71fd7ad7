// Package demodir gives the examples their default directories: a
// directory of the user's own, as the library asks of a runner directory
// (docs/guarantees.md: nothing another local user could have planted is
// acted on), never a shared name under /tmp that someone else could make
// first.
package demodir

import (
	"fmt"
	"os"
	"path/filepath"
)

// Dir is app's default directory: $XDG_RUNTIME_DIR/app when
// XDG_RUNTIME_DIR is an absolute path (a per-user directory, 0700, that the
// login session owns), else os.TempDir()/app-<uid> (the library creates it
// 0700), or os.TempDir()/app where there are no uids (Windows).
func Dir(app string) string {
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		return filepath.Join(x, app)
	}
	if uid := os.Getuid(); uid >= 0 {
		return filepath.Join(os.TempDir(), fmt.Sprintf("%s-%d", app, uid))
	}
	return filepath.Join(os.TempDir(), app)
}
