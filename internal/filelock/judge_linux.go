package filelock

import (
	"sync/atomic"
	"unsafe"

	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"golang.org/x/sys/unix"
)

// mountOf names the mount of a File: the unique ID of its mount from
// AtPath's statx (Linux 6.8), or 0, the key of the filesystem's cached
// judgment.
type mountOf struct{ mount atomic.Uint64 }

// emptyPath is statx(2)'s "" for AT_EMPTY_PATH, made once: converting ""
// on every call would allocate.
var emptyPath = [1]byte{0}

// fstat is AtPath's stat of the locked descriptor: statx(2), which also
// names the file's mount by its unique ID (Linux 6.8), kept for judge at no
// extra syscall. Where statx is refused it is fstat(2).
func (f *File) fstat(st *fileStat) error {
	var stx unix.Statx_t
	for {
		_, _, errno := unix.Syscall6(unix.SYS_STATX, uintptr(f.fd), uintptr(unsafe.Pointer(&emptyPath[0])),
			unix.AT_EMPTY_PATH|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_BASIC_STATS|unix.STATX_MNT_ID_UNIQUE, uintptr(unsafe.Pointer(&stx)), 0)
		switch errno {
		case 0:
			*st = fileStat{
				dev:   unix.Mkdev(stx.Dev_major, stx.Dev_minor),
				ino:   stx.Ino,
				nlink: uint64(stx.Nlink),
				mode:  uint32(stx.Mode),
				size:  int64(stx.Size),
			}
			if stx.Mask&unix.STATX_MNT_ID_UNIQUE != 0 {
				f.mount.Store(stx.Mnt_id)
			}
			return nil
		case unix.EINTR:
			continue
		case unix.ENOSYS, unix.EPERM, unix.EINVAL:
			// No statx here (an old kernel, a seccomp filter).
		default:
			return errno
		}
		break
	}
	var fst unix.Stat_t
	if err := unix.Fstat(f.fd, &fst); err != nil {
		return err
	}
	*st = fileStat{dev: uint64(fst.Dev), ino: uint64(fst.Ino), nlink: uint64(fst.Nlink), mode: fst.Mode, size: fst.Size}
	return nil
}

// judge refuses a lock on a filesystem whose locks do not exclude. After
// AtPath (stated) the mount's cached judgment answers without a syscall;
// otherwise, or where the kernel gives no unique mount ID, one fstatfs(2).
func (f *File) judge(stated bool) error {
	var local bool
	var err error
	if m := f.mount.Load(); stated && m != 0 {
		local, err = fsinfo.JudgeMount(m, f.fd, f.path)
	} else {
		local, err = fsinfo.Judge(f.fd, f.path)
	}
	f.local.Store(local)
	if err != nil {
		return refusedFS(f.path, err)
	}
	return nil
}
