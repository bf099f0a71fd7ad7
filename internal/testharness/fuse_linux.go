package testharness

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BindfsViews mounts two bindfs views of one real directory, a and b, in a
// new temporary directory, and returns them with the real path; each view
// is unmounted when the test ends (after the test's later cleanups, so
// after the children it started are gone). With subtype set, mountinfo
// names the views fuse.<subtype>; "" leaves bindfs's own "fuse". It skips,
// saying why, where FUSE cannot be mounted: no /dev/fuse, no bindfs
// (apt-get install bindfs fuse3), not root.
func BindfsViews(t testing.TB, subtype string) (real, a, b string) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("FUSE tests need /dev/fuse: %v", err)
	}
	bindfs, err := exec.LookPath("bindfs")
	if err != nil {
		t.Skip("FUSE tests need bindfs (apt-get install bindfs fuse3)")
	}
	if os.Geteuid() != 0 {
		t.Skip("FUSE tests mount bindfs views, which needs root here")
	}
	root := TempDir(t)
	real, a, b = filepath.Join(root, "real"), filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{real, a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, view := range []string{a, b} {
		args := []string{real, view}
		if subtype != "" {
			args = []string{"-o", "subtype=" + subtype, real, view}
		}
		if out, err := exec.Command(bindfs, args...).CombinedOutput(); err != nil {
			t.Fatalf("bindfs %s: %v: %s", view, err, out)
		}
		t.Cleanup(func() { unmount(t, view) })
	}
	return real, a, b
}

// unmount unmounts a FUSE view: fusermount3 -u, or fusermount -u, and
// lazily (-z) when it is still busy.
func unmount(t testing.TB, view string) {
	t.Helper()
	tool := "fusermount3"
	if _, err := exec.LookPath(tool); err != nil {
		tool = "fusermount"
	}
	if out, err := exec.Command(tool, "-u", view).CombinedOutput(); err != nil {
		if out2, err2 := exec.Command(tool, "-u", "-z", view).CombinedOutput(); err2 != nil {
			t.Errorf("%s -u %s: %v: %s; -z: %s", tool, view, err, out, out2)
		}
	}
}
