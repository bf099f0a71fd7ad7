package durable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/windows"
)

// SyncDir: Windows cannot fsync a directory; renames are made durable by
// MoveFileEx itself.
func SyncDir(string) error { return nil }

// foldCase: Windows paths are case-insensitive.
func foldCase(path string) string { return strings.ToLower(path) }

// modeBits: Windows files have no mode bits; Go reports 0777 for every
// directory, 0444 or 0666 for files (see OpenToAll).
const modeBits = false

// openRead opens path for reading like os.Open, but shares delete access
// too. os.Open shares only read and write, and while such a handle is open
// Windows refuses to rename over the file or to remove it (a sharing
// violation, or access denied): a process reading a state file would make
// the writer's atomic replace, or the holder's removal of its record, fail.
// With delete shared, the reader goes on reading the file it opened and the
// writer goes ahead.
func openRead(path string) (*os.File, error) {
	p, err := windows.UTF16PtrFromString(longPath(path))
	if err != nil {
		return nil, err
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ,
		windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE,
		nil, windows.OPEN_EXISTING, windows.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(h), path), nil
}

// longPath gives a path of MAX_PATH or more the \\?\ prefix that lets
// CreateFile open it, as the os package does for its own calls.
func longPath(path string) string {
	const limit = 248 // CreateDirectory's limit, the lower one: os uses it too
	if len(path) < limit || strings.HasPrefix(path, `\\`) {
		return path
	}
	abs, err := filepath.Abs(path)
	if err != nil || len(abs) < 3 || abs[1] != ':' {
		return path // relative or odd: leave it to CreateFile
	}
	return `\\?\` + abs
}

// notFound tells a missing directory from one that is not a directory.
// Windows answers ERROR_PATH_NOT_FOUND for both, and Go calls that ENOTDIR,
// so a caller that refuses "not a directory" would refuse a directory that
// simply does not exist yet. Unless path's parent exists and is not a
// directory, err becomes ERROR_FILE_NOT_FOUND, which is fs.ErrNotExist and
// not ENOTDIR, as Unix answers ENOENT.
func notFound(path string, err error) error {
	if !errors.Is(err, windows.ERROR_PATH_NOT_FOUND) {
		return err
	}
	if fi, serr := os.Stat(filepath.Dir(path)); serr == nil && !fi.IsDir() {
		return err
	}
	return windows.ERROR_FILE_NOT_FOUND
}

// replaceFile renames oldPath over newPath (MoveFileEx, replacing), trying
// again for up to a second while newPath is open elsewhere. Windows refuses
// to replace a file that another handle has open (access denied, or a
// sharing violation), delete sharing or not, unless the filesystem offers
// POSIX rename semantics; Wine 8 refuses always. Every reader here holds a
// state file open for the length of one bounded read, so the rename goes
// through as soon as that read ends.
func replaceFile(oldPath, newPath string) error {
	wait := time.Millisecond
	deadline := time.Now().Add(time.Second)
	for {
		err := os.Rename(oldPath, newPath)
		if err == nil || !inUse(err) || time.Now().After(deadline) {
			return err
		}
		if fn := testReplaceRetried.Load(); fn != nil {
			(*fn)()
		}
		time.Sleep(wait)
		wait = min(2*wait, 16*time.Millisecond)
	}
}

// testReplaceRetried, when set, is called each time replaceFile is about to
// try again: a test sees the retry.
var testReplaceRetried atomic.Pointer[func()]

// inUse reports whether err is Windows refusing a file that is open
// elsewhere.
func inUse(err error) bool {
	return errors.Is(err, windows.ERROR_ACCESS_DENIED) || errors.Is(err, windows.ERROR_SHARING_VIOLATION)
}
