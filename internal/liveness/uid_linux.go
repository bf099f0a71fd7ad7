package liveness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// uid reads the effective uid (the second field of the Uid line) of
// /proc/<pid>/status, and then verifies through the pin that the process
// read is still the pinned one.
func (p *Process) uid() (int, error) {
	path := procFile(procRoot, p.id.PID, "status")
	b, err := os.ReadFile(path)
	if err != nil {
		return -1, fmt.Errorf("liveness: uid of %v: %w", p.id, err)
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
		return -1, fmt.Errorf("liveness: uid of %v: %s has no readable Uid line", p.id, path)
	}
	if v, why := p.Verify(); v != Alive {
		return -1, fmt.Errorf("liveness: uid of %v: %v (%s): %w", p.id, v, why, ErrNotAlive)
	}
	return uid, nil
}
