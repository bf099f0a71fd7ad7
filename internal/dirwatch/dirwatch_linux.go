package dirwatch

import (
	"os"

	"golang.org/x/sys/unix"
)

// notifier is inotify(7) on a directory, read through Go's netpoller: a
// change to any file in it wakes the watcher at once.
type notifier struct {
	f      *os.File
	events chan struct{}
	done   chan struct{}
}

// openNotifier watches dir, or returns nil when inotify is unavailable or
// the watch limit is reached.
func openNotifier(dir string) *notifier {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	const mask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CREATE |
		unix.IN_DELETE | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_MODIFY
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return nil
	}
	n := &notifier{
		f:      os.NewFile(uintptr(fd), "inotify:"+dir),
		events: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	go n.run()
	return n
}

func (n *notifier) run() {
	defer close(n.done)
	buf := make([]byte, 4096)
	for {
		if _, err := n.f.Read(buf); err != nil {
			return
		}
		select {
		case n.events <- struct{}{}:
		default:
		}
	}
}

// close stops the watch and waits for its reader to exit.
func (n *notifier) close() {
	n.f.Close()
	<-n.done
}
