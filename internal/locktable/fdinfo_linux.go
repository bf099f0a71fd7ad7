package locktable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Inode names the file a lock is on, as the kernel's lock lists do: the
// device and inode numbers.
type Inode struct {
	Dev uint64 // st_dev of the path
	Ino uint64
}

// InodeOf returns the Inode of the file at path, without following a
// symlink. A missing file is an error satisfying errors.Is(err,
// fs.ErrNotExist).
func InodeOf(path string) (Inode, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return Inode{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return Inode{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}, nil
}

// Answer is what a per-process reading of the kernel says.
type Answer uint8

const (
	// Unknown: the process's /proc entries cannot be read here (another
	// user's process, a /proc mounted with hidepid, a process gone).
	Unknown Answer = iota
	// Yes: the process holds an exclusive lock on the file.
	Yes
	// No: it does not (any more).
	No
)

// HeldVia reports whether the process pid holds an exclusive flock on the
// file ino through its descriptor fd, from /proc/<pid>/fdinfo/<fd>, whose
// "lock:" lines name the locks on the file open there. It reads one small
// file, whatever else the machine or the process holds: the exact, O(1)
// confirmation of a holder that recorded its descriptor. A descriptor that
// is closed, or open on another file, is No.
func HeldVia(pid, fd int, ino Inode) Answer {
	if pid <= 0 || fd < 0 {
		return Unknown
	}
	bp := fdinfoBufs.Get().(*[]byte)
	defer fdinfoBufs.Put(bp)
	data, _, err := readAllInto(fdinfoPath(pid, fd), bp, true)
	switch {
	case err == nil:
		if lockedIn(data, ino) {
			return Yes
		}
		return No
	case errors.Is(err, unix.ENOENT):
		// No such descriptor; or no such process, which the caller, who
		// verified the process just before, tells apart if it must.
		return No
	}
	return Unknown
}

// HeldBy reports whether the process pid holds an exclusive flock on the
// file ino through any of its descriptors: a scan of /proc/<pid>/fdinfo,
// costing in proportion to the descriptors the process has open. It is the
// confirmation of a holder the kernel's lock list names, for when no
// descriptor number is known. It also works for a lock the process inherited
// (the list names the process that took it, which may be gone).
func HeldBy(pid int, ino Inode) Answer {
	if pid <= 0 {
		return Unknown
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fdinfo"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Unknown
	}
	bp := fdinfoBufs.Get().(*[]byte)
	defer fdinfoBufs.Put(bp)
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if data, _, err := readAllInto(fdinfoPath(pid, fd), bp, true); err == nil && lockedIn(data, ino) {
			return Yes
		}
	}
	return No
}

// ScanHolders lists the processes that hold an exclusive flock on the file
// ino through a descriptor of theirs, inherited ones included, by scanning
// every process's descriptors: a stat of each /proc/<pid>/fd/<n> (which
// names the file it is open on), and /proc/<pid>/fdinfo/<n> for those open
// on ino. Its cost grows with the descriptors open on the machine. complete
// is false when some process's descriptors could not be read (another
// user's, without the privilege to read them): a holder may be missing.
// This process is listed too when it holds the lock.
func ScanHolders(ino Inode) (pids []int, complete bool) {
	proc, err := unix.Open("/proc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(proc)
	bp := fdinfoBufs.Get().(*[]byte)
	defer fdinfoBufs.Put(bp)
	sc := scanBufs.Get().(*scanBuf)
	defer scanBufs.Put(sc)
	complete = true
	err = eachEntry(proc, sc.procs[:], func(name []byte) {
		pid, ok := atoi(name)
		if !ok || pid <= 0 {
			return
		}
		switch holds(proc, name, pid, ino, bp, sc.fds[:]) {
		case Yes:
			pids = append(pids, pid)
		case Unknown:
			complete = false
		}
	})
	if err != nil {
		complete = false
	}
	return pids, complete
}

// scanBuf holds ScanHolders' two directory buffers: /proc's and a
// process's fd directory's, read at once while the first is being walked.
type scanBuf struct{ procs, fds [8 << 10]byte }

var scanBufs = sync.Pool{New: func() any { return new(scanBuf) }}

// holds is one process of ScanHolders: whether any descriptor of pid (its
// name in /proc, opened relative to proc) holds the lock of ino. Each
// descriptor costs one fstatat(2) relative to the fd directory, which
// follows the /proc link to the open file; only those open on ino have
// their fdinfo read.
func holds(proc int, name []byte, pid int, ino Inode, bp *[]byte, buf []byte) Answer {
	dir, err := unix.Openat(proc, string(name)+"/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT || err == unix.ESRCH {
			return No // exited meanwhile
		}
		return Unknown
	}
	defer unix.Close(dir)
	answer := No
	var st unix.Stat_t
	err = eachEntry(dir, buf, func(fdName []byte) {
		fd, ok := atoi(fdName)
		if !ok || answer == Yes {
			return
		}
		if unix.Fstatat(dir, string(fdName), &st, 0) != nil || uint64(st.Ino) != ino.Ino || uint64(st.Dev) != ino.Dev {
			return
		}
		if data, _, err := readAllInto(fdinfoPath(pid, fd), bp, true); err == nil && lockedIn(data, ino) {
			answer = Yes
		}
	})
	if err != nil && err != unix.ENOENT && err != unix.ESRCH {
		return Unknown
	}
	return answer
}

// eachEntry calls fn with the name of each entry of the open directory fd
// but "." and "..", read with getdents64(2) into buf: no allocation per
// entry, and no sorting (os.ReadDir's), which a scan of every process does
// not need. name is valid only during the call.
func eachEntry(fd int, buf []byte, fn func(name []byte)) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for b := buf[:n]; len(b) >= direntNameOffset; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < direntNameOffset || reclen > len(b) {
				return nil
			}
			name := b[direntNameOffset:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if !(len(name) == 1 && name[0] == '.') && !(len(name) == 2 && name[0] == '.' && name[1] == '.') {
				fn(name)
			}
			b = b[reclen:]
		}
	}
}

// direntNameOffset is where the name starts in a struct linux_dirent64:
// after d_ino (8 bytes), d_off (8), d_reclen (2) and d_type (1).
const direntNameOffset = 19

// atoi parses a decimal without sign, as /proc names processes and
// descriptors; ok is false for anything else.
func atoi(b []byte) (n int, ok bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func fdinfoPath(pid, fd int) string {
	return "/proc/" + strconv.Itoa(pid) + "/fdinfo/" + strconv.Itoa(fd)
}

// lockedIn reports whether an fdinfo file's "lock:" lines hold a granted
// exclusive flock on ino. The inode must match; the device must too, except
// on the filesystems (btrfs subvolumes, overlayfs) whose stat(2) device is
// not the one the kernel prints, where the caller's corroboration (a
// verified process and, for HeldVia, its own descriptor) stands in for it.
func lockedIn(data []byte, ino Inode) bool {
	major, minor := uint64(unix.Major(ino.Dev)), uint64(unix.Minor(ino.Dev))
	for line := range bytes.Lines(data) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		rest, ok := bytes.CutPrefix(line, []byte("lock:"))
		if !ok {
			continue
		}
		h, lmaj, lmin, lino, ok := ParseLocksLine(rest)
		if ok && h.Exclusive && lino == ino.Ino && (lmaj == major && lmin == minor || !devReliable(ino)) {
			return true
		}
	}
	return false
}

// devReliable reports whether stat(2)'s device of a file on this filesystem
// is the one the kernel's lock lines print. It is not on btrfs and overlayfs,
// whose files report an anonymous device of their own.
func devReliable(ino Inode) bool { return unix.Major(ino.Dev) != 0 }

var fdinfoBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// SeesAllHolders reports whether every process that can hold a lock is
// visible from this process's PID namespace, so that the kernel's lock list
// names every holder. In the initial namespace it is; in a child one (a
// container) the list leaves out the locks of processes outside it, and a
// lock held there looks free unless it is probed. It is decided once, by
// the inode of /proc/self/ns/pid, which is PROC_PID_INIT_INO for the initial
// namespace whatever /proc is mounted there.
var SeesAllHolders = sync.OnceValue(func() bool {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return false // cannot tell: probe, to be sure
	}
	return st.Ino == procPIDInitIno
})

// procPIDInitIno is the inode number of the initial PID namespace
// (include/linux/proc_ns.h, fixed since Linux 3.8).
const procPIDInitIno = 0xEFFFFFFC

// LockThrough reports what the descriptor fd of process pid is open on, as
// that process sees it: the file's path (the /proc/<pid>/fd/<fd> link, which
// names the file through that process's own mount of it), its Inode (a stat
// through the link), and whether the descriptor carries an exclusive flock
// (a "lock:" line of its fdinfo: the kernel lists there the locks owned by
// that very open file description, on whatever file it is). Unknown when
// the process's descriptors cannot be read (another user's, or hidepid); No
// when the descriptor is closed or carries no exclusive lock. It costs a
// readlink, a stat and one small read, and looks at no file's name: the
// caller decides what the path means.
func LockThrough(pid, fd int) (path string, ino Inode, locked Answer) {
	if pid <= 0 || fd < 0 {
		return "", Inode{}, Unknown
	}
	link := "/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd)
	path, err := os.Readlink(link)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", Inode{}, No
		}
		return "", Inode{}, Unknown
	}
	var st unix.Stat_t
	if err := unix.Stat(link, &st); err != nil {
		return path, Inode{}, Unknown
	}
	ino = Inode{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
	bp := fdinfoBufs.Get().(*[]byte)
	defer fdinfoBufs.Put(bp)
	data, _, err := readAllInto(fdinfoPath(pid, fd), bp, true)
	switch {
	case errors.Is(err, unix.ENOENT):
		return path, ino, No
	case err != nil:
		return path, ino, Unknown
	}
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), []byte("lock:"))
		if !ok {
			continue
		}
		if h, _, _, _, ok := ParseLocksLine(rest); ok && h.Exclusive {
			return path, ino, Yes
		}
	}
	return path, ino, No
}

// ReadThrough reads up to limit bytes of the file that the descriptor fd of
// process pid is open on, by opening it anew through /proc/<pid>/fd/<fd>:
// through that process's own mount of the file, and so, on a network or
// FUSE filesystem, fresh from its server (an open revalidates what the
// kernel cached). It locks nothing.
func ReadThrough(pid, fd, limit int) ([]byte, error) {
	link := "/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd)
	f, err := os.OpenFile(link, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, limit)
	n, err := io.ReadFull(f, buf)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return buf[:n], err
}

// ProbeOf tells how process pid, which the kernel lists with a shared flock
// on the file ino, holds it: through a probe's descriptor (filelock's
// ProbeHeld opens the file read-only with O_NONBLOCK|O_NOFOLLOW, which its
// fdinfo "flags:" line shows, and holds the lock for the few instructions
// between taking and dropping it), and whether the process runs, or through
// another descriptor. A probe's hold ends as soon as the prober runs, however
// long the scheduler keeps it off a core: it is evidence, not a duration,
// that a caller waits on. It scans /proc/<pid>/fdinfo, and reads
// /proc/<pid>/task/*/stat only for a probe's hold.
func ProbeOf(pid int, ino Inode) Probe {
	if pid <= 0 {
		return ProbeUnknown
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/fdinfo"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ProbeUnknown
	}
	bp := fdinfoBufs.Get().(*[]byte)
	defer fdinfoBufs.Put(bp)
	probe := false
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, _, err := readAllInto(fdinfoPath(pid, fd), bp, true)
		if err != nil || !sharedIn(data, ino) {
			continue
		}
		if !probeFlags(data) {
			return ProbeNot
		}
		probe = true
	}
	switch {
	case !probe:
		return ProbeGone
	case running(pid):
		return ProbeRunning
	}
	return ProbeAsleep
}

// sharedIn reports whether an fdinfo file's "lock:" lines hold a granted
// shared flock on ino (the device as lockedIn matches it).
func sharedIn(data []byte, ino Inode) bool {
	major, minor := uint64(unix.Major(ino.Dev)), uint64(unix.Minor(ino.Dev))
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), []byte("lock:"))
		if !ok {
			continue
		}
		h, lmaj, lmin, lino, ok := ParseLocksLine(rest)
		if ok && !h.Exclusive && lino == ino.Ino && (lmaj == major && lmin == minor || !devReliable(ino)) {
			return true
		}
	}
	return false
}

// probeFlags reports whether an fdinfo file's "flags:" line (octal open
// flags) is a probe's descriptor's: read-only, O_NONBLOCK and O_NOFOLLOW.
func probeFlags(data []byte) bool {
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("flags:"))
		if !ok {
			continue
		}
		flags, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 8, 32)
		const mark = unix.O_NONBLOCK | unix.O_NOFOLLOW
		return err == nil && flags&unix.O_ACCMODE == unix.O_RDONLY && flags&mark == mark
	}
	return false
}

// running reports whether a thread of process pid is running or runnable
// (R) or in an uninterruptible wait (D), from /proc/<pid>/task/*/stat; a
// process gone, or all of whose threads sleep or are stopped, is not.
func running(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, t := range tasks {
		data, err := os.ReadFile(dir + t.Name() + "/stat")
		if err != nil {
			continue
		}
		// "tid (comm) S ...": comm may hold spaces and parentheses.
		if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) {
			if s := data[i+2]; s == 'R' || s == 'D' {
				return true
			}
		}
	}
	return false
}
