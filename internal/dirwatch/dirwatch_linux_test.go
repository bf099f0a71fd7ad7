package dirwatch

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wakeWait bounds a wait for a wake-up that must come: far beyond any
// inotify delivery, so that only a missing one fails.
const wakeWait = 10 * time.Second

// woken waits for w to be woken by a change (not by its safety interval).
func woken(t *testing.T, what string, w *Watcher) {
	t.Helper()
	select {
	case <-w.Changed():
	case <-time.After(wakeWait):
		t.Fatalf("%s: no wake-up in %v", what, wakeWait)
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// inotifyFDs counts this process's inotify instances.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.Contains(target, "inotify") {
			n++
		}
	}
	return n
}

// TestWatchersShareOneInstance: watchers of two directories, two of them on
// the same one, are each woken by a change in their own directory, share
// one inotify instance, and closing one of a directory's watchers leaves
// the other watching.
func TestWatchersShareOneInstance(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	a1, a2, b1 := New(a), New(a), New(b)
	defer b1.Close()
	if a1.Changed() == nil || a2.Changed() == nil || b1.Changed() == nil {
		t.Fatal("no kernel notification: the watchers poll")
	}
	if n := inotifyFDs(t); n != 1 {
		t.Fatalf("%d inotify instances for three watchers, want 1", n)
	}
	touch(t, filepath.Join(a, "f"))
	woken(t, "a's first watcher", a1)
	woken(t, "a's second watcher", a2)
	select {
	case <-b1.Changed():
		t.Fatal("b's watcher was woken by a change in a")
	default:
	}
	a1.Close()
	touch(t, filepath.Join(a, "g"))
	woken(t, "a's second watcher after the first closed", a2)
	a2.Close()
	touch(t, filepath.Join(b, "f"))
	woken(t, "b's watcher", b1)
}

// TestWatcherAfterTheLastClosed: the reader goroutine exits with the last
// watch (goleak checks it in TestMain) and a watcher opened at once after
// gets a new one, every time; the instance is opened once.
func TestWatcherAfterTheLastClosed(t *testing.T) {
	dir := t.TempDir()
	for i := range 200 {
		New(dir).Close()
		w := New(dir)
		touch(t, filepath.Join(dir, "f"))
		woken(t, "a watcher after the last one closed, round "+strconv.Itoa(i), w)
		w.Close()
	}
	if n := inotifyFDs(t); n != 1 {
		t.Fatalf("%d inotify instances after 400 watchers, want 1", n)
	}
}

// TestWatcherOfARemovedDirectory: removing the directory wakes its watcher
// (the kernel drops the watch), which keeps looking every SafetyInterval;
// closing it later touches no other directory's watch, and a directory made
// again under the same name is watched anew.
func TestWatcherOfARemovedDirectory(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	keep := New(other)
	defer keep.Close()
	w := New(dir)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	woken(t, "the removed directory's watcher", w)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	again := New(dir)
	defer again.Close()
	w.Close()
	touch(t, filepath.Join(dir, "f"))
	woken(t, "the directory made again", again)
	touch(t, filepath.Join(other, "f"))
	woken(t, "another directory's watcher", keep)
}

// TestWaitReturnsOnChange: Wait returns on a change long before its safety
// interval, and with ctx's error once ctx ends.
func TestWaitReturnsOnChange(t *testing.T) {
	dir := t.TempDir()
	w := New(dir)
	defer w.Close()
	errc := make(chan error, 1)
	go func() { errc <- w.Wait(context.Background(), time.Hour, nil) }()
	touch(t, filepath.Join(dir, "f"))
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wakeWait):
		t.Fatal("Wait did not return on a change")
	}
	// A quiet directory's watcher (the touch above may still be waking w).
	quiet := New(t.TempDir())
	defer quiet.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := quiet.Wait(ctx, time.Hour, nil); err != context.Canceled {
		t.Fatalf("Wait with an ended ctx: %v", err)
	}
}

// BenchmarkWatcherOpenClose prices a watch's whole life: New then Close of
// a shared watch, side by side with an inotify instance of its own (the
// raw calls: inotify_init1, inotify_add_watch, close), whose close waits for
// the kernel's SRCU grace period.
func BenchmarkWatcherOpenClose(b *testing.B) {
	dir := b.TempDir()
	keep := New(b.TempDir()) // as in a runner, some other watch is open
	defer keep.Close()
	b.Run("impl=shared", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			New(dir).Close()
		}
	})
	b.Run("impl=own-instance", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
				b.Fatal(err)
			}
			unix.Close(fd)
		}
	})
}
