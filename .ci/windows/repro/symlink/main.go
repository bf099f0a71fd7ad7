// Command symlink reproduces a Wine 8 limitation: os.Symlink returns nil but
// makes nothing. Wine 8.0's CreateSymbolicLinkW is a stub that reports
// success (WINEDEBUG=fixme+file shows "CreateSymbolicLinkW (...): stub"), so
// nothing can plant a symlink under Wine, and no symlink refusal can be
// tested there. On Windows the call either makes the link or fails (without
// the privilege or developer mode).
//
//	GOOS=windows GOARCH=amd64 go build -o symlink.exe ./.ci/windows/repro/symlink
//	wine64 symlink.exe   # under Wine 8: "os.Symlink said nil, but os.Lstat: ... not found", exit 1
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir, err := os.MkdirTemp("", "symlink")
	if err != nil {
		fmt.Println("mkdirtemp:", err)
		os.Exit(2)
	}
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
		fmt.Println("write:", err)
		os.Exit(2)
	}
	if err := os.Symlink(target, link); err != nil {
		fmt.Println("os.Symlink:", err) // Windows without the privilege says so here
		os.Exit(2)
	}
	fi, err := os.Lstat(link)
	os.Remove(link)
	os.Remove(target)
	os.Remove(dir)
	switch {
	case err != nil:
		fmt.Println("os.Symlink said nil, but os.Lstat:", err)
		os.Exit(1)
	case fi.Mode()&os.ModeSymlink == 0:
		fmt.Printf("os.Symlink said nil, but os.Lstat says mode %v: not a symlink\n", fi.Mode())
		os.Exit(1)
	}
	fmt.Printf("os.Lstat mode %v: a symlink\n", fi.Mode())
}
