//go:build !linux

package filelock

import (
	"io/fs"
	"os"
)

// Inode names the file a lock is on.
type Inode struct{ info fs.FileInfo }

// InodeOf returns the Inode of the file at path, without following a
// symlink.
func InodeOf(path string) (Inode, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return Inode{}, err
	}
	return Inode{info: fi}, nil
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
