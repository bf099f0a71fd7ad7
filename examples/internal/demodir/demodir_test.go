package demodir

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestDir(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	want := filepath.Join(os.TempDir(), fmt.Sprintf("app-%d", os.Getuid()))
	if runtime.GOOS == "windows" {
		want = filepath.Join(os.TempDir(), "app")
	}
	if got := Dir("app"); got != want {
		t.Errorf("Dir without XDG_RUNTIME_DIR = %q, want %q", got, want)
	}
	t.Setenv("XDG_RUNTIME_DIR", "relative")
	if got := Dir("app"); got != want {
		t.Errorf("Dir with a relative XDG_RUNTIME_DIR = %q, want %q", got, want)
	}
	run := filepath.Join(os.TempDir(), "run-user") // a name only: Dir makes nothing
	t.Setenv("XDG_RUNTIME_DIR", run)
	if got := Dir("app"); got != filepath.Join(run, "app") {
		t.Errorf("Dir with XDG_RUNTIME_DIR = %q, want %q", got, filepath.Join(run, "app"))
	}
}
