package runnerstate

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
)

// ErrNotHolder reports a call that needs the directory's runner lock (Publish)
// from a process that did not take it through Acquire or Takeover, or whose
// lock is gone (released, or the lock file was replaced under it).
var ErrNotHolder = errors.New("runnerstate: this process does not hold the runner lock")

// Hostile or broken paths. Each is wrapped in an *fs.PathError naming the path,
// and says what to do.
var (
	errSymlink    = errors.New("is a symlink, which is never followed here; remove it")
	errIsDir      = errors.New("is a directory where a file belongs; move it away")
	errNotRegular = errors.New("is not a regular file; move it away")
	errBadName    = errors.New("is not a plain file name of its own")
	errHardLinked = errors.New("has another name (a hard link), and writing to it would write there too; remove the other link")
)

// pathError names the operation and path. The operation carries the package
// name so that every message starts with it.
func pathError(op, path string, err error) error {
	return &fs.PathError{Op: "runnerstate: " + op, Path: path, Err: err}
}

func symlinkError(path string) error { return pathError("refusing", path, errSymlink) }
func isDirError(path string) error   { return pathError("refusing", path, errIsDir) }
func notRegular(path string) error   { return pathError("refusing", path, errNotRegular) }

var loggerPtr atomic.Pointer[slog.Logger]

// SetLogger sets where warnings go (a stale record cleared, a corrupt file set
// aside, a foreign holder seen). nil restores the default, slog.Default().
// Safe for concurrent use.
func SetLogger(l *slog.Logger) { loggerPtr.Store(l) }

func logger() *slog.Logger {
	if l := loggerPtr.Load(); l != nil {
		return l
	}
	return slog.Default()
}

// warnOnce logs a warning once per key for the life of the process, so that a
// corrupt file that every probe reads is reported once, not on every probe.
// The memory is bounded: past maxWarned keys it starts afresh.
func warnOnce(key, msg string, args ...any) {
	warned.Lock()
	if _, ok := warned.keys[key]; ok {
		warned.Unlock()
		return
	}
	if len(warned.keys) >= maxWarned {
		clear(warned.keys)
	}
	warned.keys[key] = struct{}{}
	warned.Unlock()
	logger().Warn(msg, args...)
}

const maxWarned = 1024

var warned = struct {
	sync.Mutex
	keys map[string]struct{}
}{keys: make(map[string]struct{})}

// errorf formats an error whose message starts with the package name.
func errorf(format string, args ...any) error {
	return fmt.Errorf("runnerstate: "+format, args...)
}

// errTooLarge is readHint's answer for a file larger than asked for.
var errTooLarge = errors.New("file is larger than a record can be")

// isNotExist reports whether err says a path does not exist.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
