package fsinfo

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Judge judges the filesystem of the open file fd, at path file (its
// directory is what the hook and the error name), by its f_fstypename: one fstatfs(2). nil when
// its locks exclude or it cannot be told; an *Error otherwise.
func Judge(fd int, file string) error {
	if off.Load() {
		return nil
	}
	if hook.Load() != nil {
		if a, ok := hooked(filepath.Dir(file)); ok {
			return verdict(filepath.Dir(file), a)
		}
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return nil
	}
	return verdict(filepath.Dir(file), DarwinType(unix.ByteSliceToString(st.Fstypename[:])))
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
