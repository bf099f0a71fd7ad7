//go:build !linux

package runnerstate

// dirNotify is kernel change notification on a directory; only Linux has it
// here (inotify), elsewhere watchers poll.
type dirNotify struct{ events chan struct{} }

func openDirNotify(dir string) *dirNotify { return nil }

func (n *dirNotify) close() {}
