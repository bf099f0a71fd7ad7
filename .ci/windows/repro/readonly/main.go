// Command readonly reproduces a Wine 8 limitation seen when Wine runs as
// root (as CI does): a file with the read-only attribute (os.WriteFile with
// mode 0o444) opens for writing. Windows refuses with ERROR_ACCESS_DENIED,
// administrators included; Wine maps the attribute to Unix mode bits and
// leaves the check to open(2), which root passes.
//
//	GOOS=windows GOARCH=amd64 go build -o readonly.exe ./.ci/windows/repro/readonly
//	wine64 readonly.exe   # under Wine 8 as root: "opened a read-only file for writing", exit 1
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir, err := os.MkdirTemp("", "readonly")
	if err != nil {
		fmt.Println("mkdirtemp:", err)
		os.Exit(2)
	}
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		fmt.Println("write:", err)
		os.Exit(2)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err == nil {
		f.Close()
	}
	os.Chmod(path, 0o644)
	os.Remove(path)
	os.Remove(dir)
	if err == nil {
		fmt.Println("opened a read-only file for writing")
		os.Exit(1)
	}
	fmt.Println("refused:", err)
}
