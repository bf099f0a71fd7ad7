//go:build unix

package owner

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Look returns the parts of abs (absolute) from "/" down, each as fstat of a
// descriptor opened on it without following a symlink, with abs's symlinks
// resolved first (the longest prefix of it that exists). missing says abs
// itself is not there: the parts are those of its deepest ancestor that
// is. A part that is no directory (a file, or a symlink put in place since
// the path was resolved) is an error naming it.
func Look(abs string) (parts []Part, missing bool, err error) {
	parts, missing, err = walk(filepath.Clean(abs), "")
	if err == nil {
		return parts, missing, nil
	}
	// A part is no directory: a symlink, most likely. Resolve, and walk
	// what it leads to (a part that is still none is an error).
	return walk(resolve(abs))
}

// walk is Look along resolved, a path without symlinks when rest is ""
// (else its existing prefix has none, and rest is what is below it).
func walk(resolved, rest string) (parts []Part, missing bool, err error) {
	fd, err := unix.Open("/", openDir, 0)
	if err != nil {
		return nil, false, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	defer func() { unix.Close(fd) }()
	p, err := partOf(fd, "/")
	if err != nil {
		return nil, false, err
	}
	parts = append(parts, p)
	path := "/"
	for _, name := range strings.Split(strings.TrimPrefix(resolved, "/"), "/") {
		if name == "" {
			continue
		}
		path = filepath.Join(path, name)
		next, err := openat(fd, name)
		if errors.Is(err, unix.ENOENT) {
			return parts, true, nil
		}
		if err != nil {
			return nil, false, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		unix.Close(fd)
		fd = next
		p, err := partOf(fd, path)
		if err != nil {
			return nil, false, err
		}
		parts = append(parts, p)
	}
	return parts, rest != "", nil
}

// resolve is abs with the symlinks of its longest existing prefix
// resolved, and the part of abs below that prefix ("" when abs exists).
func resolve(abs string) (resolved, rest string) {
	prefix, rest := filepath.Clean(abs), ""
	for {
		if r, err := filepath.EvalSymlinks(prefix); err == nil {
			if rest == "" {
				return r, ""
			}
			return filepath.Join(r, rest), rest
		}
		parent := filepath.Dir(prefix)
		if parent == prefix {
			return filepath.Clean(abs), rest
		}
		rest = filepath.Join(filepath.Base(prefix), rest)
		prefix = parent
	}
}

// partOf is the Part that fstat of fd, a directory at path, says.
func partOf(fd int, path string) (Part, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Part{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	mode := fs.FileMode(st.Mode & 0o777)
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Part{}, &fs.PathError{Op: "open", Path: path, Err: unix.ENOTDIR}
	}
	return Part{Path: path, UID: int(st.Uid), GID: int(st.Gid), Mode: mode}, nil
}

// Files returns the owner of each of names in dir that is there (absent
// ones are left out), as fstatat of one descriptor of dir says, without
// following a symlink: a symlink is its own owner's.
func Files(dir string, names ...string) ([]Part, error) {
	fd, err := unix.Open(dir, openDir&^unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var out []Part
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		out = append(out, Part{Path: filepath.Join(dir, name), UID: int(st.Uid), GID: int(st.Gid), Mode: fs.FileMode(st.Mode & 0o777)})
	}
	return out, nil
}

// ProcessUID is the uid of process pid, as the owner of /proc/<pid> says
// (Linux), or -1 where that cannot be read.
func ProcessUID(pid int) int {
	var st unix.Stat_t
	if pid <= 0 || unix.Stat("/proc/"+strconv.Itoa(pid), &st) != nil {
		return -1
	}
	return int(st.Uid)
}

// FileOf is the Part that fstat of fd, an open file at path, says; false
// when it cannot be told.
func FileOf(fd uintptr, path string) (Part, bool) {
	var st unix.Stat_t
	if err := unix.Fstat(int(fd), &st); err != nil {
		return Part{}, false
	}
	return Part{Path: path, UID: int(st.Uid), GID: int(st.Gid), Mode: fs.FileMode(st.Mode & 0o777)}, true
}

// ownerOf is the uid that owns path (its symlinks followed), -1 when it
// cannot be told.
func ownerOf(path string) int {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return -1
	}
	return int(st.Uid)
}
