//go:build !linux

package locktable

import (
	"errors"
	"os"
)

// Inode names the file a lock is on, as on Linux; only its existence is
// looked up here.
type Inode struct{ Dev, Ino uint64 }

// InodeOf returns a zero Inode for the file at path, or the error of looking
// it up without following a symlink.
func InodeOf(path string) (Inode, error) {
	_, err := os.Lstat(path)
	return Inode{}, err
}

// Answer is what a per-process reading of the kernel says.
type Answer uint8

const (
	Unknown Answer = iota // it cannot be read here
	Yes                   // the process holds an exclusive lock on the file
	No                    // it does not
)

// HeldVia is Unknown: only Linux shows a process's locks (fdinfo).
func HeldVia(pid, fd int, ino Inode) Answer { return Unknown }

// HeldBy is Unknown: only Linux shows a process's locks (fdinfo).
func HeldBy(pid int, ino Inode) Answer { return Unknown }

// SeesAllHolders is false: only Linux lists lock holders at all.
func SeesAllHolders() bool { return false }

// ScanHolders finds nothing here: only Linux shows a process's descriptors
// and their locks. complete is false.
func ScanHolders(Inode) (pids []int, complete bool) { return nil, false }

// LockThrough is Unknown: only Linux shows another process's descriptors.
func LockThrough(pid, fd int) (path string, ino Inode, locked Answer) {
	return "", Inode{}, Unknown
}

// ReadThrough is unsupported: only Linux opens another process's
// descriptors (/proc/<pid>/fd).
func ReadThrough(pid, fd, limit int) ([]byte, error) { return nil, errors.ErrUnsupported }

// ProbeOf is ProbeUnknown: only Linux shows a process's locks (fdinfo).
func ProbeOf(pid int, ino Inode) Probe { return ProbeUnknown }
