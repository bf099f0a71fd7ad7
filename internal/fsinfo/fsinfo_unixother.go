//go:build unix && !linux && !darwin

package fsinfo

import "path/filepath"

// Judge is JudgeDir on this system, which judges no filesystem.
func Judge(_ int, file string) error { return JudgeDir(filepath.Dir(file)) }
