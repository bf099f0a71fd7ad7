//go:build unix

package testharness

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// AsUser returns a copy of this test binary that uid may execute, in a
// directory PublicDir made (t.TempDir's parent is 0700), and the
// SysProcAttr that runs a process as uid, its gid the same number. It
// skips t unless this process is root and the kernel lets it start a
// process as uid.
func AsUser(t testing.TB, uid int) (bin string, attr *syscall.SysProcAttr) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to start a process as another user")
	}
	attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	probe := exec.Command("/bin/true")
	probe.SysProcAttr = attr
	if err := probe.Run(); err != nil {
		t.Skipf("cannot start a process as uid %d here: %v", uid, err)
	}
	bin = filepath.Join(PublicDir(t), filepath.Base(os.Args[0]))
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin, attr
}
