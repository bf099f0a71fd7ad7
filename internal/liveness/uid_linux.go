package liveness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// uidOf reads the effective uid (the Uid line's second field) of
// /proc/<pid>/status, then the pid's start identity (see UID).
func uidOf(id Identity) (int, error) {
	path := procFile(procRoot(), id.PID, "status")
	b, err := os.ReadFile(path)
	if err != nil && notExist(err) {
		return -1, fmt.Errorf("liveness: uid of %v: %w", id, ErrNotAlive)
	}
	if err != nil {
		return -1, fmt.Errorf("liveness: uid of %v: %w", id, err)
	}
	uid := -1
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(v); len(f) >= 2 {
				uid, err = strconv.Atoi(f[1])
			}
			break
		}
	}
	if uid < 0 || err != nil {
		return -1, fmt.Errorf("liveness: uid of %v: %s has no readable Uid line", id, path)
	}
	switch v, why := checkAfter(id); v {
	case Alive, Self:
		return uid, nil
	case Dead, Stale:
		return -1, fmt.Errorf("liveness: uid of %v: %v (%s): %w", id, v, why, ErrNotAlive)
	default:
		return -1, fmt.Errorf("liveness: uid of %v: cannot be read: %v (%s)", id, v, why)
	}
}
