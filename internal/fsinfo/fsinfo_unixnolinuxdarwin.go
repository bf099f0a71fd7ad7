//go:build unix && !linux && !darwin

package fsinfo

import "path/filepath"

// Judge is JudgeDir on this system, which judges no filesystem: local is
// false, as nothing is known of it.
func Judge(_ int, file string) (local bool, err error) { return false, JudgeDir(filepath.Dir(file)) }
