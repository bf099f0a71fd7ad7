//go:build !unix

package durable

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// oNoFollow: these systems have no such open flag; a symlink is refused by
// an Lstat before opening, which leaves a window a local attacker could race.
const oNoFollow = 0

// ReadFile reads up to max bytes of the regular file at path, refusing a
// symlink, a directory or another non-regular file (by an Lstat first). A
// missing file, or a missing directory on the way to it, is an error
// satisfying errors.Is(err, fs.ErrNotExist). A file larger than max returns
// its first max bytes and ErrTooLarge. On Windows the file is opened sharing
// delete access, so that reading never makes a writer's replace or removal
// of it fail.
func ReadFile(path string, limit int) ([]byte, error) {
	data, _, err := ReadFileID(path, limit)
	return data, err
}

// FileID names the file a read found at a path; Dev and Ino are zero here
// and UID -1: these systems give no device and inode numbers, and no uid.
type FileID struct {
	Dev, Ino uint64
	UID      int
}

// ReadFileID is ReadFile; its FileID is zero here, UID -1.
func ReadFileID(path string, limit int) ([]byte, FileID, error) {
	data, err := readFile(path, limit)
	return data, FileID{UID: -1}, err
}

func readFile(path string, limit int) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: notFound(path, Unwrap(err))}
	}
	if err := CheckMode(path, fi.Mode()); err != nil {
		return nil, err
	}
	f, err := openRead(path)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: notFound(path, Unwrap(err))}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: Unwrap(err)}
	}
	if len(data) > limit {
		return data[:limit], ErrTooLarge
	}
	return data, nil
}

// Key identifies a directory by its absolute, cleaned path (case-folded
// where the filesystem is case-insensitive), so that two spellings of one
// directory are one key.
type Key struct{ path string }

// KeyOf returns dir's Key.
func KeyOf(dir string) (Key, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Key{}, &fs.PathError{Op: "abs", Path: dir, Err: err}
	}
	return Key{path: foldCase(filepath.Clean(abs))}, nil
}

// GiveToDirOwner does nothing here: no owners to give a file to.
func GiveToDirOwner(int, string) {}

// ErrChanged is Rewrite's answer when the file at path is not a single
// regular file of its own any more.
var ErrChanged = errors.New("has another name (a hard link); not rewritten in place")

// Rewrite is not available here: a descriptor kept open while it writes
// would block the removal of the file's directory (Windows), and these
// systems cannot tell a file's identity. It returns an *fs.PathError
// wrapping errors.ErrUnsupported and writes nothing.
func Rewrite(path string, _ int, _ func(old []byte) ([]byte, bool)) error {
	return &fs.PathError{Op: "rewrite", Path: path, Err: errors.ErrUnsupported}
}

// ReadTail reads the regular file at path from offset from, or from its
// last limit bytes when more was written since from. Here it reads the file
// whole (at most 64 MiB) and cuts it.
func ReadTail(path string, from int64, limit int) ([]byte, error) {
	return ReadTailBefore(path, from, -1, limit)
}

// ReadTailBefore is ReadTail of the file cut at offset to (to < 0: not
// cut): what was written between from and to, at most its last limit
// bytes.
func ReadTailBefore(path string, from, to int64, limit int) ([]byte, error) {
	data, err := ReadFile(path, 64<<20)
	if err != nil && !errors.Is(err, ErrTooLarge) {
		return nil, err
	}
	if to >= 0 && to < int64(len(data)) {
		data = data[:to]
	}
	off := max(from, int64(len(data))-int64(limit))
	if off >= int64(len(data)) {
		return nil, nil
	}
	return data[off:], nil
}
