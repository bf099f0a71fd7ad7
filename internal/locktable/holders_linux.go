package locktable

import (
	"bytes"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// procLocks is /proc/locks.
const procLocks = "/proc/locks"

// Holders lists the granted flock locks on the file at path from
// /proc/locks, without touching the lock: a probe that locked, even shared,
// would make a concurrent LOCK_EX|LOCK_NB fail. exists is false when there is
// no file at path; known is false when the kernel cannot tell (no /proc, the
// file cannot be stat'ed) or listed no holder in a table read in several
// passes, and the caller falls back to filelock.ProbeHeld.
//
// The kernel produces /proc/locks a page at a time, a pass per read(2) with
// the lock table held still for that pass only (fs/locks.c locks_start), and
// each pass resumes by position: a lock released between two passes shifts
// the next entry into the part already read, out of view. So an entry that is
// listed was held, but "none listed" is the truth only when the whole table
// came in one pass (readAllInto), as it does while it fits in a page (about
// fifty locks machine-wide). A pass also ends early, well short of its page,
// when the next record does not fit what is left: a lock is printed with its
// blocked waiters, a line each, as one record. So a first read counts as the
// whole table only when the next read, a pass from where it ended, finds
// nothing more. What that leaves: a long record that ended the first pass,
// and, before the second, the release of enough of the locks already read to
// bring the table within them; then the second read finds nothing, and a
// lock listed after that record is missed.
//
// /proc/locks names a lock by "major:minor:inode" of the superblock's device.
// On btrfs subvolumes and overlayfs stat(2) reports another device number, so
// entries that match the inode but not the device come with DevMatch false.
func Holders(path string) (holders []Holder, exists, known bool) {
	ino, err := InodeOf(path)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, false, true
		}
		// Permission denied, a name too long...: the kernel cannot be asked
		// about this file, and a probe will say why, naming the path.
		return nil, true, false
	}
	holders, known = HoldersOf(ino)
	return holders, true, known
}

// HoldersOf is Holders for the file ino.
func HoldersOf(ino Inode) (holders []Holder, known bool) {
	if fn := testHookList.Load(); fn != nil {
		(*fn)()
	}
	bp := procBufs.Get().(*[]byte)
	defer procBufs.Put(bp)
	data, onePass, err := readAllInto(procLocks, bp, false)
	if err != nil {
		return nil, false
	}
	major, minor := uint64(unix.Major(ino.Dev)), uint64(unix.Minor(ino.Dev))
	for line := range bytes.Lines(data) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		h, lmaj, lmin, lino, ok := ParseLocksLine(line)
		if !ok || lino != ino.Ino {
			continue
		}
		h.DevMatch = lmaj == major && lmin == minor
		holders = append(holders, h)
	}
	return holders, len(holders) > 0 || onePass
}

// ParseLocksLine parses one /proc/locks line of a granted FLOCK lock:
//
//	1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF
//
// Blocked waiters ("1: -> FLOCK ...") and other lock types are skipped. The
// format is fs/locks.c's lock_get_status.
func ParseLocksLine(line []byte) (h Holder, major, minor, ino uint64, ok bool) {
	var f [8][]byte
	n := 0
	for n < len(f) {
		for len(line) > 0 && isSpace(line[0]) {
			line = line[1:]
		}
		if len(line) == 0 {
			break
		}
		i := bytes.IndexFunc(line, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
		if i < 0 {
			i = len(line)
		}
		f[n], line = line[:i], line[i:]
		n++
	}
	if n < 6 || string(f[1]) != "FLOCK" || !isOrdinal(f[0]) || (string(f[2]) != "ADVISORY" && string(f[2]) != "MANDATORY") {
		return h, 0, 0, 0, false
	}
	switch string(f[3]) {
	case "WRITE":
		h.Exclusive = true
	case "READ":
	default:
		return h, 0, 0, 0, false
	}
	pid, err := strconv.Atoi(string(f[4]))
	if err != nil {
		return h, 0, 0, 0, false
	}
	if pid > 0 {
		h.PID = pid
	}
	dev := f[5]
	c1 := bytes.IndexByte(dev, ':')
	if c1 < 0 {
		return h, 0, 0, 0, false
	}
	c2 := bytes.IndexByte(dev[c1+1:], ':')
	if c2 < 0 {
		return h, 0, 0, 0, false
	}
	c2 += c1 + 1
	if major, err = strconv.ParseUint(string(dev[:c1]), 16, 32); err != nil {
		return h, 0, 0, 0, false
	}
	if minor, err = strconv.ParseUint(string(dev[c1+1:c2]), 16, 32); err != nil {
		return h, 0, 0, 0, false
	}
	if ino, err = strconv.ParseUint(string(dev[c2+1:]), 10, 64); err != nil {
		return h, 0, 0, 0, false
	}
	return h, major, minor, ino, true
}

// ListsHolders reports whether the kernel lists lock holders here
// (/proc/locks can be read). Where it does not, holders can only be probed.
var ListsHolders = sync.OnceValue(func() bool {
	fd, err := unix.Open(procLocks, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// isSpace reports whether c is ASCII white space, as bytes.Fields splits on:
// a form feed or carriage return inside a line separates fields too.
func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\v', '\f', '\r':
		return true
	}
	return false
}

// isOrdinal reports whether b is a /proc/locks line number: digits and ':'.
func isOrdinal(b []byte) bool {
	if len(b) < 2 || b[len(b)-1] != ':' {
		return false
	}
	for _, c := range b[:len(b)-1] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

var procBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// readAllInto reads a whole (proc) file into *bp, growing it as needed, and
// reports whether it came in one pass of the kernel's seq_file: its first
// read(2) returned data and the second, a new pass resuming where the first
// ended, returned nothing. (A first read short of the page proves nothing
// alone: a pass also ends where the next record does not fit, and a record
// of /proc/locks can be many lines long; see Holders.) With oneRecord, the
// file is one seq_file record (fdinfo), produced whole by the first read, so
// any short read is its end, and the read that would return 0 is saved.
func readAllInto(path string, bp *[]byte, oneRecord bool) (data []byte, onePass bool, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(fd)
	buf := (*bp)[:0]
	for reads := 0; ; reads++ {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := cap(buf) - len(buf)
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			reads--
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if n == 0 {
			onePass = reads <= 1
			break
		}
		buf = buf[:len(buf)+n]
		if n < room && oneRecord {
			onePass = reads == 0
			break
		}
	}
	*bp = buf
	return buf, onePass, nil
}

// testHookList, when set, is called before every read of the kernel's lock
// list.
var testHookList atomic.Pointer[func()]

// SetListHook makes fn be called before every read of the kernel's lock list
// (/proc/locks), and returns a func that removes it: for tests that prove a
// holder was confirmed without it.
func SetListHook(fn func()) (restore func()) {
	old := testHookList.Swap(&fn)
	return func() { testHookList.Store(old) }
}
