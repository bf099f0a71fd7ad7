package fsinfo

import (
	"path/filepath"

	"golang.org/x/sys/windows"
)

// JudgeDir judges the filesystem of the directory dir, before any file is
// created in it: a UNC path or a mapped network drive does not exclude.
// nil when its locks exclude or it cannot be told; an *Error otherwise.
func JudgeDir(dir string) error {
	if off.Load() {
		return nil
	}
	if a, ok := hooked(dir); ok {
		return verdict(dir, a)
	}
	return verdict(dir, judgeWindows(dir, false))
}

// TypeOf is dir's filesystem name (NTFS, ReFS...), "unc" or "remote", or ""
// when it cannot be read.
func TypeOf(dir string) string {
	if a, ok := hooked(dir); ok {
		return a.Type
	}
	return judgeWindows(dir, true).Type
}

// judgeWindows looks at dir's volume: its path, its drive type, and with
// named set its filesystem's name.
func judgeWindows(dir string, named bool) Answer {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	vol := filepath.VolumeName(abs)
	if a := WindowsPath(vol, false, ""); !a.Excludes {
		return a
	}
	root, err := windows.UTF16PtrFromString(vol + `\`)
	if err != nil {
		return Answer{Excludes: true}
	}
	remote := windows.GetDriveType(root) == windows.DRIVE_REMOTE
	var fsName string
	if named && !remote {
		buf := make([]uint16, windows.MAX_PATH+1)
		if windows.GetVolumeInformation(root, nil, 0, nil, nil, nil, &buf[0], uint32(len(buf))) == nil {
			fsName = windows.UTF16ToString(buf)
		}
	}
	return WindowsPath(vol, remote, fsName)
}
