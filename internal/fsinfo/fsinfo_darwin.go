package fsinfo

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Judge judges the filesystem of the open file fd, at path file (its
// directory is what the hook and the error name), by its f_fstypename: one
// fstatfs(2). err is nil when its locks exclude, its type is trusted, or it
// cannot be told; an *Error otherwise. local says its own kind excludes (a
// trusted type does not make it so).
func Judge(fd int, file string) (local bool, err error) {
	if off.Load() {
		return false, nil
	}
	if hook.Load() != nil {
		if a, ok := hooked(filepath.Dir(file)); ok {
			return a.Excludes, verdict(filepath.Dir(file), a)
		}
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false, nil
	}
	a := DarwinType(unix.ByteSliceToString(st.Fstypename[:]))
	return a.Excludes, verdict(filepath.Dir(file), a)
}

// JudgeDir is Judge for the directory dir itself, before any file is
// created in it. A directory that does not exist is nil.
func JudgeDir(dir string) error {
	if off.Load() {
		return nil
	}
	if a, ok := hooked(dir); ok {
		return verdict(dir, a)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil
	}
	return verdict(dir, DarwinType(unix.ByteSliceToString(st.Fstypename[:])))
}

// TypeOf is dir's f_fstypename (apfs, nfs, smbfs...), or "" when it cannot
// be read.
func TypeOf(dir string) string {
	if a, ok := hooked(dir); ok {
		return a.Type
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return ""
	}
	return unix.ByteSliceToString(st.Fstypename[:])
}
