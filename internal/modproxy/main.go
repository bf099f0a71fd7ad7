// Command modproxy writes one version of a module of this repository into
// a file-based module proxy (GOPROXY=file://DIR), laid out as a proxy
// serves it: the zip golang.org/x/mod/zip makes (the zip a public proxy
// would make from the same files), the go.mod, the .info and the list.
// .ci/modules.sh uses it to build the root and the etcd module as a user
// outside the repository does.
//
//	modproxy -pseudo REV
//	    prints the pseudo-version of commit REV (v0.0.0-<UTC time>-<12 hex>)
//	modproxy -out DIR -module PATH -version V [-subdir S]
//	    V a pseudo-version: the module from the commit V names, which must
//	    be in HEAD's history and have V's time (git archive of that commit)
//	modproxy -out DIR -module PATH -version V -dir D
//	    the module from the files of directory D as they are now
//
// Run from inside the repository's work tree. Exits 1 on any error, saying
// which, and 2 on a usage error.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

func main() {
	var a args
	flag.StringVar(&a.pseudo, "pseudo", "", "print the pseudo-version of this commit and exit")
	flag.StringVar(&a.out, "out", "", "the proxy's directory")
	flag.StringVar(&a.module, "module", "", "the module's path")
	flag.StringVar(&a.version, "version", "", "the version to serve")
	flag.StringVar(&a.subdir, "subdir", "", "the module's directory in the repository (with a pseudo-version)")
	flag.StringVar(&a.dir, "dir", "", "serve the files of this directory instead of a commit's")
	flag.Parse()
	if flag.NArg() != 0 || (a.pseudo == "") == (a.out == "" || a.module == "" || a.version == "") {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(a); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

type args struct{ pseudo, out, module, version, subdir, dir string }

func run(a args) error {
	if a.pseudo != "" {
		c, err := commitOf(a.pseudo)
		if err != nil {
			return err
		}
		fmt.Println(module.PseudoVersion("v0", "", c.time, c.hash[:12]))
		return nil
	}
	mv := module.Version{Path: a.module, Version: a.version}
	if err := module.Check(mv.Path, mv.Version); err != nil {
		return err
	}
	if a.dir != "" {
		return a.serveDir(mv)
	}
	return a.serveCommit(mv)
}

// serveDir serves the files of a.dir as they are now, dated now.
func (a args) serveDir(mv module.Version) error {
	gomod, err := os.ReadFile(filepath.Join(a.dir, "go.mod"))
	if err != nil {
		return err
	}
	return write(a.out, mv, gomod, time.Now(), func(f *os.File) error { return zip.CreateFromDir(f, mv, a.dir) })
}

// serveCommit serves the commit mv's pseudo-version names, as a proxy
// would: that commit's files under a.subdir, dated by the commit.
func (a args) serveCommit(mv module.Version) error {
	if !module.IsPseudoVersion(mv.Version) {
		return fmt.Errorf("%s@%s: not a pseudo-version; give -dir to serve a directory", mv.Path, mv.Version)
	}
	rev, _ := module.PseudoVersionRev(mv.Version)
	when, _ := module.PseudoVersionTime(mv.Version)
	c, err := commitOf(rev)
	if err != nil {
		return fmt.Errorf("%s@%s names commit %s, which this clone does not have (a shallow clone, or a branch merged by rebase or squash, which dropped it): %w", mv.Path, mv.Version, rev, err)
	}
	if !c.time.Equal(when) {
		return fmt.Errorf("%s@%s: commit %s is dated %s, not the version's %s: the pseudo-version is wrong (modproxy -pseudo %s prints the right one)", mv.Path, mv.Version, rev, c.time.Format(time.RFC3339), when.Format(time.RFC3339), rev)
	}
	if _, err := git("merge-base", "--is-ancestor", c.hash, "HEAD"); err != nil {
		return fmt.Errorf("%s@%s: commit %s is not in HEAD's history (a branch that was not merged?): %w", mv.Path, mv.Version, rev, err)
	}
	gomod, err := git("show", c.hash+":"+path.Join(a.subdir, "go.mod"))
	if err != nil {
		return err
	}
	// The commit's files as git archive gives them (zip.CreateFromVCS's
	// source too, which does not find a git worktree's repository), then
	// CreateFromDir's rules: no vendor/, no directory of another module.
	tree, err := os.MkdirTemp("", "modproxy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	if err := extract(c.hash, tree); err != nil {
		return err
	}
	return write(a.out, mv, gomod, c.time, func(f *os.File) error {
		return zip.CreateFromDir(f, mv, filepath.Join(tree, filepath.FromSlash(a.subdir)))
	})
}

// extract writes the regular files of commit rev into dir.
func extract(rev, dir string) error {
	cmd := exec.Command("git", "archive", "--format=tar", rev)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = cmd.Wait()
			return fmt.Errorf("git archive %s: %w: %s", rev, err, bytes.TrimSpace(stderr.Bytes()))
		}
		if h.Typeflag != tar.TypeReg || !filepath.IsLocal(h.Name) {
			continue
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", rev, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// write lays mv out in the proxy at out: the .mod, the .zip, the .info and
// mv.Version in the list. The go.mod must name mv.Path.
func write(out string, mv module.Version, gomod []byte, when time.Time, zipTo func(*os.File) error) error {
	if got := modfile.ModulePath(gomod); got != mv.Path {
		return fmt.Errorf("%s@%s: its go.mod names module %q", mv.Path, mv.Version, got)
	}
	escPath, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, escVersion)
	f, err := os.Create(base + ".zip")
	if err != nil {
		return err
	}
	if err := zipTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s@%s: %w", mv.Path, mv.Version, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{mv.Version, when.UTC()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".info", info, 0o644); err != nil {
		return err
	}
	list, err := os.ReadFile(filepath.Join(dir, "list"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(list))
	if !slices.Contains(versions, mv.Version) {
		versions = append(versions, mv.Version)
	}
	return os.WriteFile(filepath.Join(dir, "list"), []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

type commit struct {
	hash string
	time time.Time
}

// commitOf resolves rev to a commit of this repository and its committer
// time, the time a pseudo-version carries.
func commitOf(rev string) (commit, error) {
	out, err := git("log", "-1", "--format=%H %ct", rev+"^{commit}", "--")
	if err != nil {
		return commit{}, err
	}
	hash, secs, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	t, err := strconv.ParseInt(secs, 10, 64)
	if !ok || err != nil || len(hash) < 12 {
		return commit{}, fmt.Errorf("git log %s: unexpected %q", rev, out)
	}
	return commit{hash, time.Unix(t, 0).UTC()}, nil
}

func git(args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
