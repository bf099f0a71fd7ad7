package durable

import "strings"

// SyncDir: Windows cannot fsync a directory; renames are made durable by
// MoveFileEx itself.
func SyncDir(string) error { return nil }

// foldCase: Windows paths are case-insensitive.
func foldCase(path string) string { return strings.ToLower(path) }
