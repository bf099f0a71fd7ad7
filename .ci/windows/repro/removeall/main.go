// Command removeall reproduces a Wine 8 limitation: os.RemoveAll fails with
// "Invalid function" (ERROR_INVALID_FUNCTION) on every path under Wine 8.0.
//
// Go (1.26 here) removes through Deleteat, which first asks for
// NtSetInformationFile(FileDispositionInformationEx, POSIX semantics) and
// falls back to the old way only on STATUS_INVALID_INFO_CLASS,
// STATUS_INVALID_PARAMETER or STATUS_NOT_SUPPORTED. Wine 8 answers
// STATUS_NOT_IMPLEMENTED, which becomes ERROR_INVALID_FUNCTION. os.Remove
// (DeleteFileW, RemoveDirectoryW) works. See ntsetinfo.c for the same in C.
//
//	GOOS=windows GOARCH=amd64 go build -o removeall.exe ./.ci/windows/repro/removeall
//	wine64 removeall.exe   # prints the error and exits 1 under Wine 8
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir, err := os.MkdirTemp("", "removeall")
	if err != nil {
		fmt.Println("mkdirtemp:", err)
		os.Exit(2)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		fmt.Println("write:", err)
		os.Exit(2)
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Println("os.RemoveAll:", err)
		// Show that the plain calls work, and clean up with them.
		fmt.Println("os.Remove of the file:", os.Remove(filepath.Join(dir, "f")))
		fmt.Println("os.Remove of the dir:", os.Remove(dir))
		os.Exit(1)
	}
	fmt.Println("os.RemoveAll: ok")
}
