package fsinfo

import (
	"maps"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Judge judges the filesystem of the open file fd, at path file (its
// directory is what the hook and the error name): one fstatfs(2). err is nil
// when its locks exclude, when its type is trusted, or when it cannot be
// told (the lock itself then says what it can); an *Error otherwise. local
// says the filesystem's own kind (its magic number, or the hook's answer)
// excludes, which a trusted type does not make it: only there is what this
// process sees of the file (its length) never out of date.
func Judge(fd int, file string) (local bool, err error) {
	if off.Load() {
		return false, nil
	}
	if hook.Load() != nil {
		if a, ok := hooked(filepath.Dir(file)); ok {
			return a.Excludes, verdict(filepath.Dir(file), a)
		}
	}
	st, ok := statfs(func(st *unix.Statfs_t) error { return unix.Fstatfs(fd, st) })
	if !ok {
		return false, nil
	}
	excludes, name := LinuxMagic(int64(st.Type))
	if excludes {
		return true, nil
	}
	return false, verdict(filepath.Dir(file), Answer{Type: typeName(fd, "", int64(st.Type), name)})
}

// JudgeMount is Judge for an open file whose mount's unique ID (statx's
// STATX_MNT_ID_UNIQUE, never reused while the system runs) is known: the
// mount's judgment is cached, so only the first lock on a mount pays the
// fstatfs(2) (and, for a filesystem that does not exclude, the mountinfo
// read). A trusted type is looked up on every call, so that Trust applies
// at once.
func JudgeMount(mount uint64, fd int, file string) (local bool, err error) {
	if off.Load() {
		return false, nil
	}
	if hook.Load() != nil {
		return Judge(fd, file)
	}
	if m := mounts.Load(); m != nil {
		if a, ok := (*m)[mount]; ok {
			if a.Excludes {
				return true, nil
			}
			return false, verdict(filepath.Dir(file), a)
		}
	}
	st, ok := statfs(func(st *unix.Statfs_t) error { return unix.Fstatfs(fd, st) })
	if !ok {
		return false, nil
	}
	a := Answer{Excludes: true}
	if excludes, name := LinuxMagic(int64(st.Type)); !excludes {
		a = Answer{Type: typeName(fd, "", int64(st.Type), name)}
	}
	remember(mount, a)
	if a.Excludes {
		return true, nil
	}
	return false, verdict(filepath.Dir(file), a)
}

// mounts is the judgment of each mount JudgeMount met, by unique mount ID:
// an immutable map, replaced whole on each addition, so that a lookup takes
// no lock.
var mounts atomic.Pointer[map[uint64]Answer]

var mountsMu sync.Mutex

// remember adds a mount's judgment to mounts (starting afresh past
// maxNames mounts).
func remember(mount uint64, a Answer) {
	mountsMu.Lock()
	defer mountsMu.Unlock()
	m := map[uint64]Answer{}
	if old := mounts.Load(); old != nil && len(*old) < maxNames {
		maps.Copy(m, *old)
	}
	m[mount] = a
	mounts.Store(&m)
}

// JudgeDir is Judge for the directory dir itself, before any file is
// created in it: one statfs(2). A directory that does not exist is nil.
func JudgeDir(dir string) error {
	if off.Load() {
		return nil
	}
	if a, ok := hooked(dir); ok {
		return verdict(dir, a)
	}
	st, ok := statfs(func(st *unix.Statfs_t) error { return unix.Statfs(dir, st) })
	if !ok {
		return nil
	}
	excludes, name := LinuxMagic(int64(st.Type))
	if excludes {
		return nil
	}
	return verdict(dir, Answer{Type: typeName(unix.AT_FDCWD, dir, int64(st.Type), name)})
}

// statfs runs call (a statfs(2) or fstatfs(2) into its argument), again
// when a signal interrupts it. ok is false when it fails: the filesystem
// cannot be told, and the lock itself then says what it can.
func statfs(call func(*unix.Statfs_t) error) (st unix.Statfs_t, ok bool) {
	for {
		switch err := call(&st); err {
		case nil:
			return st, true
		case unix.EINTR:
		default:
			return st, false
		}
	}
}

// TypeOf is the type name of dir's filesystem as mountinfo names it (ext4,
// tmpfs, fuse.sshfs...), or "" when it cannot be read. It reads mountinfo
// once per mount.
func TypeOf(dir string) string {
	if a, ok := hooked(dir); ok {
		return a.Type
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return ""
	}
	_, name := LinuxMagic(int64(st.Type))
	return typeName(unix.AT_FDCWD, dir, int64(st.Type), name)
}

// mountKey names one mount: its unique mount ID where the kernel gives one
// (Linux 6.8), else its reusable ID together with the magic number and
// device. A device number alone is never a key: FUSE and tmpfs reuse them.
type mountKey struct {
	id     uint64
	unique bool
	magic  int64
	dev    uint64
}

var names = struct {
	sync.Mutex
	m map[mountKey]string
}{m: make(map[mountKey]string)}

// maxNames bounds the cache: past it, it starts afresh.
const maxNames = 256

// typeName is the mountinfo type name of the mount of fd (or of path
// relative to fd, when path is not ""), cached per mount; fallback where
// it cannot be read.
func typeName(fd int, path string, magic int64, fallback string) string {
	var stx unix.Statx_t
	flags := unix.AT_STATX_DONT_SYNC
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Statx(fd, path, flags, unix.STATX_MNT_ID_UNIQUE|unix.STATX_MNT_ID, &stx); err != nil {
		return fallback
	}
	key := mountKey{magic: magic, dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor)}
	switch {
	case stx.Mask&unix.STATX_MNT_ID_UNIQUE != 0:
		key.id, key.unique = stx.Mnt_id, true
	case stx.Mask&unix.STATX_MNT_ID != 0:
		key.id = stx.Mnt_id
	}
	names.Lock()
	name, ok := names.m[key]
	names.Unlock()
	if ok {
		return name
	}
	name = mountinfoType(stx.Dev_major, stx.Dev_minor)
	if name == "" {
		return fallback
	}
	names.Lock()
	if len(names.m) >= maxNames {
		clear(names.m)
	}
	names.m[key] = name
	names.Unlock()
	return name
}

// mountinfoPath is read for type names.
const mountinfoPath = "/proc/self/mountinfo"

// mountinfoType finds the type of the mount of device major:minor in
// mountinfo: every mount of one device is of one type, whichever is found.
func mountinfoType(major, minor uint32) string {
	data, err := os.ReadFile(mountinfoPath)
	if err != nil {
		return ""
	}
	return ParseMountinfo(data, major, minor)
}
