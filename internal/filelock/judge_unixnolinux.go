//go:build unix && !linux

package filelock

import (
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"golang.org/x/sys/unix"
)

// mountOf is empty here: the filesystem is judged on every lock.
//
//lint:ignore U1000 File embeds it on every Unix; only Linux's has a field to read
type mountOf struct{}

// fstat is AtPath's stat of the locked descriptor.
func (f *File) fstat(st *fileStat) error {
	var fst unix.Stat_t
	if err := unix.Fstat(f.fd, &fst); err != nil {
		return err
	}
	*st = fileStat{dev: uint64(fst.Dev), ino: uint64(fst.Ino), nlink: uint64(fst.Nlink), mode: uint32(fst.Mode), size: fst.Size}
	return nil
}

// judge refuses a lock on a filesystem whose locks do not exclude: one
// fstatfs(2) (macOS: its f_fstypename).
func (f *File) judge(bool) error {
	local, err := fsinfo.Judge(f.fd, f.path)
	f.local.Store(local)
	if err != nil {
		return refusedFS(f.path, err)
	}
	return nil
}
