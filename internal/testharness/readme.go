package testharness

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// READMEDaemonBlocks returns the Go blocks of the README at path's section
// "A server and its client: package `daemon`": the server and the client,
// in order. It fails t when the section or its two blocks are not there.
func READMEDaemonBlocks(t testing.TB, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## A server and its client: package `daemon`\n")
	if !ok {
		t.Fatalf("%s has no section on package daemon", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for {
		_, rest, ok := strings.Cut(section, "\n```go\n")
		if !ok {
			break
		}
		code, after, ok := strings.Cut(rest, "\n```\n")
		if !ok {
			t.Fatalf("%s: a Go block of the daemon section does not end", path)
		}
		blocks = append(blocks, code)
		section = after
	}
	if len(blocks) != 2 {
		t.Fatalf("%s: the daemon section has %d Go blocks, not 2 (a server and a client)", path, len(blocks))
	}
	return blocks
}

// READMEDaemonImports is the import block of a program made of the README's
// daemon blocks: what they use.
const READMEDaemonImports = `import (
	"context"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/daemon"
)
`

// BuildOverlaid builds program, the source of a main package, as the
// package at pkg (a directory of the module at root, as "internal/x") with
// go build -overlay, so that nothing is written in the tree, and returns
// the binary's path and the build's output. It skips t where there is no
// go command.
func BuildOverlaid(t testing.TB, root, pkg, program string) (bin string, out []byte, err error) {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command here: ", err)
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(src, []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, filepath.FromSlash(pkg), "main.go"): src}})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(tmp, filepath.Base(pkg))
	cmd := exec.Command(gotool, "build", "-overlay", ov, "-o", bin, "./"+pkg)
	cmd.Dir = root
	out, err = cmd.CombinedOutput()
	return bin, out, err
}
