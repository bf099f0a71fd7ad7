package locktable

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FuzzParseLocksLine feeds /proc/locks lines. What it accepts, formatted the
// way fs/locks.c prints it, must parse back to the same lock.
func FuzzParseLocksLine(f *testing.F) {
	f.Add([]byte("1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"))
	f.Add([]byte("2: FLOCK  ADVISORY  READ  99 fd:00:131077 0 EOF"))
	f.Add([]byte("3: -> FLOCK  ADVISORY  WRITE 77 08:01:5678 0 EOF"))
	f.Add([]byte("4: POSIX  ADVISORY  WRITE 1 00:19:12 0 EOF"))
	f.Add([]byte("5: OFDLCK ADVISORY  READ  -1 00:06:1028 0 EOF"))
	f.Add([]byte("6: FLOCK  ADVISORY  WRITE -1 103:02:18446744073709551615 0 EOF"))
	f.Fuzz(func(t *testing.T, line []byte) {
		h, major, minor, ino, ok := ParseLocksLine(line)
		if !ok {
			return
		}
		if h.PID < 0 {
			t.Fatalf("negative pid %d from %q", h.PID, line)
		}
		if major > 1<<32-1 || minor > 1<<32-1 {
			t.Fatalf("device %x:%x out of range from %q", major, minor, line)
		}
		fields := strings.Fields(string(line))
		if len(fields) < 6 || fields[1] != "FLOCK" {
			t.Fatalf("accepted a line that is not a granted FLOCK lock: %q", line)
		}
		kind := "READ "
		if h.Exclusive {
			kind = "WRITE"
		}
		canon := fmt.Sprintf("1: FLOCK  ADVISORY  %s %d %02x:%02x:%d 0 EOF", kind, h.PID, major, minor, ino)
		h2, major2, minor2, ino2, ok2 := ParseLocksLine([]byte(canon))
		if !ok2 || h2 != h || major2 != major || minor2 != minor || ino2 != ino {
			t.Fatalf("%q parsed as %+v %x:%x:%d; its canonical form %q as %+v %x:%x:%d (%v)",
				line, h, major, minor, ino, canon, h2, major2, minor2, ino2, ok2)
		}
	})
}

// TestHoldersOfNeverMissesSilently holds a lock taken before a thousand
// others (so listed after them, pages into /proc/locks) while eighty more are
// taken and released in turn, ahead of it, and another reader reads the
// table in a loop: passes of the table then skip entries. HoldersOf may then
// fail to list the lock, but only with known false.
func TestHoldersOfNeverMissesSilently(t *testing.T) {
	dir := t.TempDir()
	// On one CPU, all the locks are in one of the kernel's per-CPU lists, in
	// the order taken, and so are the churners' changes.
	restore := onCPU0(t)
	held := lockedFile(t, filepath.Join(dir, "held"))
	for i := range 1000 {
		lockedFile(t, filepath.Join(dir, fmt.Sprint("other", i)))
	}
	restore()
	ino, err := InodeOf(held.Name())
	if err != nil {
		t.Fatal(err)
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		churn := make([]*os.File, 40)
		for i := range churn {
			f, err := os.Create(filepath.Join(dir, fmt.Sprint("churn", g, "-", i)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			churn[i] = f
		}
		wg.Go(func() {
			defer onCPU0(t)()
			for {
				select {
				case <-quit:
					return
				default:
				}
				for _, f := range churn {
					unix.Flock(int(f.Fd()), unix.LOCK_EX)
				}
				for _, f := range churn {
					unix.Flock(int(f.Fd()), unix.LOCK_UN)
				}
			}
		})
	}
	// And another reader of the whole table, as lslocks or a monitoring
	// agent is: each of its passes holds the table still.
	wg.Go(func() {
		buf := make([]byte, 128<<10)
		for {
			select {
			case <-quit:
				return
			default:
			}
			f, err := os.Open(procLocks)
			if err != nil {
				return
			}
			for n, err := f.Read(buf); n > 0 && err == nil; n, err = f.Read(buf) {
			}
			f.Close()
		}
	})
	defer func() { close(quit); wg.Wait() }()
	unknown, reads := 0, 0
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); reads++ {
		holders, known := HoldersOf(ino)
		if len(holders) == 0 && known {
			t.Fatalf("HoldersOf listed no holder of %s and called that known, while this process held it", held.Name())
		}
		if !known {
			unknown++
		}
	}
	t.Logf("%d reads: %d not known (a pass skipped the entry)", reads, unknown)
}

// TestHoldersOfLongRecordEndsAPassEarly lists, ahead of a held lock, a lock
// with forty blocked waiters: /proc/locks prints a lock and its waiters as
// one record of forty-one lines, which does not fit what is left of the
// kernel's page, so the first read(2) ends well short of a page although the
// table goes on. That short read is not the whole table, and HoldersOf must
// not call "no holder" known from it.
func TestHoldersOfLongRecordEndsAPassEarly(t *testing.T) {
	dir := t.TempDir()
	restore := onCPU0(t) // one per-CPU list, newest lock first
	held := lockedFile(t, filepath.Join(dir, "held"))
	var blocker *os.File
	for i := range 200 {
		f := lockedFile(t, filepath.Join(dir, fmt.Sprint("other", i)))
		if i == 140 { // about sixty records from the head of the list
			blocker = f
		}
	}
	restore()
	var wg sync.WaitGroup
	t.Cleanup(func() { blocker.Close(); wg.Wait() }) // each waiter in turn gets the lock and lets go
	for range 40 {
		w, err := os.Open(blocker.Name())
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer w.Close()
			unix.Flock(int(w.Fd()), unix.LOCK_EX) // until each before it lets go
		})
	}
	bino, err := InodeOf(blocker.Name())
	if err != nil {
		t.Fatal(err)
	}
	waiters := fmt.Sprintf(":%d ", bino.Ino)
	for deadline := time.Now().Add(20 * time.Second); ; {
		data, err := os.ReadFile(procLocks)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for line := range strings.Lines(string(data)) {
			if strings.Contains(line, "->") && strings.Contains(line, waiters) {
				n++
			}
		}
		if n == 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 40 waiters are listed as blocked on %s", n, blocker.Name())
		}
		runtime.Gosched()
	}
	ino, err := InodeOf(held.Name())
	if err != nil {
		t.Fatal(err)
	}
	holders, known := HoldersOf(ino)
	if len(holders) == 0 && known {
		t.Fatalf("HoldersOf listed no holder of %s and called that known, while this process held it", held.Name())
	}
}

// lockedFile creates path and takes an exclusive flock on it, until the test
// ends.
func lockedFile(t *testing.T, path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return f
}

// onCPU0 keeps the calling goroutine on one thread, allowed only CPU 0,
// until the returned func.
func onCPU0(t *testing.T) (restore func()) {
	runtime.LockOSThread()
	var was, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		t.Fatal(err)
	}
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	return func() {
		unix.SchedSetaffinity(0, &was)
		runtime.UnlockOSThread()
	}
}
