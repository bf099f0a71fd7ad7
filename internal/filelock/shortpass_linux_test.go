package filelock

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHoldersOfReadsPastAShortPass: a /proc/locks record is a lock with its
// blocked waiters, so a pass of the table can end far short of its page
// (where a long record does not fit) with more to come. The holder of a lock
// listed after such a record is still found: a short first read is never
// taken for the whole table.
func TestHoldersOfReadsPastAShortPass(t *testing.T) {
	dir := t.TempDir()
	unpin := onCPU0(t) // one per-CPU list, in the order taken: newest first
	held := lockedFile(t, filepath.Join(dir, "held"))
	for i := range 100 {
		lockedFile(t, filepath.Join(dir, fmt.Sprint("before", i)))
	}
	long := lockedFile(t, filepath.Join(dir, "long"))
	for i := range 20 {
		lockedFile(t, filepath.Join(dir, fmt.Sprint("after", i)))
	}
	unpin()
	// Sixty waiters blocked on long make its record about 3 KB, listed
	// after a kilobyte of newer locks: it cannot fit the first page.
	const waiters = 60
	var wg sync.WaitGroup
	for range waiters {
		f, err := os.Open(long.Name())
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer f.Close()
			unix.Flock(int(f.Fd()), unix.LOCK_EX)
			unix.Flock(int(f.Fd()), unix.LOCK_UN)
		})
	}
	defer func() { long.Close(); wg.Wait() }()
	longIno, err := InodeOf(long.Name())
	if err != nil {
		t.Fatal(err)
	}
	blocked := func() int {
		data, err := os.ReadFile(procLocks)
		if err != nil {
			t.Fatal(err)
		}
		return countWaiters(data, longIno)
	}
	for n := 0; blocked() < waiters; n++ {
		if n > 100000 {
			t.Fatalf("the waiters never blocked (%d of %d)", blocked(), waiters)
		}
	}
	ino, err := InodeOf(held.Name())
	if err != nil {
		t.Fatal(err)
	}
	holders, known := HoldersOf(ino)
	if len(holders) == 0 && known {
		t.Fatalf("HoldersOf listed no holder of %s and called that known, while this process held it", held.Name())
	}
	if len(holders) != 1 || holders[0].PID != os.Getpid() {
		t.Errorf("holders of %s: %+v (known %v), want this process", held.Name(), holders, known)
	}
}

// countWaiters counts the blocked waiters ("-> FLOCK") /proc/locks lists for
// ino.
func countWaiters(data []byte, ino Inode) int {
	n := 0
	suffix := fmt.Sprintf(":%d ", ino.Ino)
	for _, line := range splitLines(data) {
		if containsAll(line, "->", "FLOCK", suffix) {
			n++
		}
	}
	return n
}

func splitLines(data []byte) []string {
	var lines []string
	start := 0
	for i, c := range data {
		if c == '\n' {
			lines = append(lines, string(data[start:i]))
			start = i + 1
		}
	}
	return lines
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
