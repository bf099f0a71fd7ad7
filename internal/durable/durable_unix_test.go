//go:build unix

package durable

import "os"

// openRead is, for the tests, a handle such as ReadFile holds while it
// reads: on Unix any open file, which never stands in the way of a rename
// or a removal. Windows and the other systems have their own in the
// package.
func openRead(path string) (*os.File, error) { return os.Open(path) }
