package dirwatch

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The process shares one inotify(7) instance among its watchers, each
// directory one watch in it, opened on first use and kept: closing an
// instance waits for an SRCU grace period in the kernel (fs/notify/group.c
// fsnotify_destroy_group), 15 to 25 ms on a 2-core VM, which every Takeover
// and Standby would pay on its way out, while removing a watch is queued
// and costs nothing. It also keeps a process to one instance of the user's
// fs.inotify.max_user_instances (128 by default), however many directories
// it watches. One reader goroutine runs while any watch does.

// mask is what wakes a watcher: any file in the directory created, written,
// renamed, removed or changed, and the directory itself removed or moved.
const mask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CREATE |
	unix.IN_DELETE | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_MODIFY

// notifier is one watcher's share of the instance: a change in its
// directory wakes it at once.
type notifier struct {
	events chan struct{}
	wd     int32 // its directory's watch; -1 once the kernel dropped it
}

// hub is the process's inotify instance and who listens on each watch.
var hub struct {
	mu      sync.Mutex
	f       *os.File // nil until first used, or when it cannot be had
	subs    map[int32]map[*notifier]struct{}
	reading chan struct{} // closed when the running reader exits; nil: none runs
}

// openNotifier watches dir, or returns nil when inotify is unavailable or
// the watch limit is reached (the watcher then polls).
func openNotifier(dir string) *notifier {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	if hub.f == nil {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			return nil
		}
		hub.f = os.NewFile(uintptr(fd), "inotify")
		hub.subs = map[int32]map[*notifier]struct{}{}
	}
	var wd int
	err := rawConn(func(fd uintptr) error {
		var err error
		wd, err = unix.InotifyAddWatch(int(fd), dir, mask)
		return err
	})
	if err != nil {
		return nil
	}
	n := &notifier{events: make(chan struct{}, 1), wd: int32(wd)}
	if hub.subs[n.wd] == nil {
		hub.subs[n.wd] = map[*notifier]struct{}{}
	}
	hub.subs[n.wd][n] = struct{}{}
	if hub.reading == nil {
		hub.reading = make(chan struct{})
		go read(hub.reading)
	}
	return n
}

// close stops the watch, removing it from the instance when it was the
// directory's last, and when it was the process's last, waits for the
// reader goroutine to exit.
func (n *notifier) close() {
	hub.mu.Lock()
	if subs := hub.subs[n.wd]; subs != nil {
		delete(subs, n)
		if len(subs) == 0 {
			delete(hub.subs, n.wd)
			wd := n.wd
			_ = rawConn(func(fd uintptr) error {
				_, err := unix.InotifyRmWatch(int(fd), uint32(wd))
				return err
			})
		}
	}
	var reading chan struct{}
	if len(hub.subs) == 0 && hub.reading != nil {
		reading = hub.reading
		_ = hub.f.SetReadDeadline(time.Unix(1, 0)) // wakes the reader to exit
	}
	hub.mu.Unlock()
	if reading != nil {
		<-reading
	}
}

// read reads the instance's events and wakes the watchers they are for,
// until a deadline wakes it (close of the last watch): then it exits, after
// starting its successor when a watch came in the meantime.
func read(done chan struct{}) {
	defer close(done)
	buf := make([]byte, 4096)
	for {
		k, err := hub.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			hub.mu.Lock()
			_ = hub.f.SetReadDeadline(time.Time{})
			hub.reading = nil
			if len(hub.subs) > 0 {
				hub.reading = make(chan struct{})
				go read(hub.reading)
			}
			hub.mu.Unlock()
			return
		}
		if err != nil {
			// Not seen in practice. Every watcher is woken to look, and the
			// next watch started starts a new reader.
			hub.mu.Lock()
			hub.reading = nil
			wakeEveryone()
			hub.mu.Unlock()
			return
		}
		dispatch(buf[:k])
	}
}

// dispatch wakes the watchers of each event's watch in buf: all of them on a
// queue overflow. A watch the kernel dropped (its directory removed, or the
// filesystem unmounted: IN_IGNORED) wakes its watchers one last time; they
// look again every SafetyInterval from then on.
func dispatch(buf []byte) {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	for len(buf) >= unix.SizeofInotifyEvent {
		// struct inotify_event: wd, mask, cookie, len, then len bytes of name.
		wd := int32(binary.NativeEndian.Uint32(buf[0:]))
		mask := binary.NativeEndian.Uint32(buf[4:])
		size := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[12:]))
		if size > len(buf) {
			break
		}
		buf = buf[size:]
		if mask&unix.IN_Q_OVERFLOW != 0 {
			wakeEveryone()
			continue
		}
		subs := hub.subs[wd]
		wake(subs)
		if mask&unix.IN_IGNORED != 0 {
			for n := range subs {
				n.wd = -1 // never removed again: the number may be another directory's by then
			}
			delete(hub.subs, wd)
		}
	}
}

// wakeEveryone wakes every watcher, with hub.mu held.
func wakeEveryone() {
	for _, subs := range hub.subs {
		wake(subs)
	}
}

// wake wakes the watchers in subs, with hub.mu held.
func wake(subs map[*notifier]struct{}) {
	for n := range subs {
		select {
		case n.events <- struct{}{}:
		default:
		}
	}
}

// rawConn runs fn on the instance's descriptor, with hub.mu held.
func rawConn(fn func(fd uintptr) error) error {
	rc, err := hub.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(fd) }); err != nil {
		return err
	}
	return ferr
}
