package filelock

import (
	"fmt"
	"strings"
	"testing"
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
