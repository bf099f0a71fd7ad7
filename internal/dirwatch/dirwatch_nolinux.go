//go:build !linux

package dirwatch

// notifier is kernel change notification on a directory; only Linux has it
// here (inotify), elsewhere watchers poll.
type notifier struct{ events chan struct{} }

func openNotifier(string) *notifier { return nil }

func (*notifier) close() {}
