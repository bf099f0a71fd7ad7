package runnerstate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/module"
)

// The house's measurable rules (docs/architecture.md, "How the house is
// kept"): small interfaces, short doc comments, root files of one concept
// and a bounded size, and a test file beside each root source file.
const (
	maxInterfaceMethods = 6
	maxDocLines         = 30
	maxRootFileLines    = 800
)

// houseSources lists the non-test Go files of the root package, internal/,
// daemon/ and the etcd module's library (the bench module, the examples
// and the compatibility test are outside the house's rules).
func houseSources(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, top := range []string{".", "internal", "daemon", "etcd"} {
		err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && path != top && (top == "." || d.Name() == "testdata" || d.Name() == "examples") {
				return filepath.SkipDir // the root is walked alone; its subdirectories are their own
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				files = append(files, path)
			}
			return nil
		})
		require.NoError(t, err)
	}
	return files
}

// TestHouseInterfacesAreSmall: no interface has more than
// maxInterfaceMethods methods; a wider one is a path split between a
// decider and a doer that belong together.
func TestHouseInterfacesAreSmall(t *testing.T) {
	for _, path := range houseSources(t) {
		f := parseHouseFile(t, path)
		ast.Inspect(f.file, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if it, ok := ts.Type.(*ast.InterfaceType); ok {
					assert.LessOrEqual(t, len(it.Methods.List), maxInterfaceMethods, "%s: interface %s", path, ts.Name.Name)
				}
			}
			return true
		})
	}
}

// TestHouseDocCommentsAreShort: every doc comment (a package's, a
// declaration's, a field's) is at most maxDocLines lines: the contract and
// a pointer; the mechanics live beside the code that has them.
func TestHouseDocCommentsAreShort(t *testing.T) {
	for _, path := range houseSources(t) {
		f := parseHouseFile(t, path)
		ast.Inspect(f.file, func(n ast.Node) bool {
			var doc *ast.CommentGroup
			switch n := n.(type) {
			case *ast.File:
				doc = n.Doc
			case *ast.FuncDecl:
				doc = n.Doc
			case *ast.GenDecl:
				doc = n.Doc
			case *ast.TypeSpec:
				doc = n.Doc
			case *ast.ValueSpec:
				doc = n.Doc
			case *ast.Field:
				doc = n.Doc
			}
			if doc != nil {
				from, to := f.fset.Position(doc.Pos()), f.fset.Position(doc.End())
				assert.LessOrEqual(t, to.Line-from.Line+1, maxDocLines, "%s:%d: a doc comment of %d lines", path, from.Line, to.Line-from.Line+1)
			}
			return true
		})
	}
}

// TestHouseRootFiles: each root source file is at most maxRootFileLines
// lines and has a test file of its own name (X.go: X_test.go, or X_linux_test.go,
// X_unix_test.go...).
func TestHouseRootFiles(t *testing.T) {
	tests, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	for _, path := range houseSources(t) {
		if filepath.Dir(path) != "." {
			continue
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		lines := strings.Count(string(data), "\n")
		assert.LessOrEqual(t, lines, maxRootFileLines, "%s: %d lines", path, lines)
		base := strings.TrimSuffix(path, ".go")
		twin := false
		for _, tf := range tests {
			if tf == base+"_test.go" || strings.HasPrefix(tf, base+"_") && strings.Count(strings.TrimPrefix(tf, base+"_"), "_") == 1 {
				twin = true
			}
		}
		assert.True(t, twin, "%s has no %s_test.go", path, base)
	}
}

// TestHouseModulePaths: every file git tracks is a valid path in a module
// (module.CheckFilePath: no name Windows reserves, such as nul or con, no
// character a file system refuses), and no two differ only in case. A
// module proxy zips the module with golang.org/x/mod/zip, which refuses the
// whole module over one such path, and a clone on Windows cannot check the
// file out.
func TestHouseModulePaths(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH: the tracked paths are git's to list")
	}
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git work tree (git ls-files: %v): the tracked paths are git's to list", err)
	}
	paths := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	require.NotEmpty(t, paths)
	folded := make(map[string]string)
	for _, path := range paths {
		assert.NoError(t, module.CheckFilePath(path), "a tracked path a module cannot hold: rename it")
		key := strings.ToLower(path)
		if other, ok := folded[key]; ok {
			t.Errorf("%s and %s differ only in case: a module zip refuses them, rename one", other, path)
		}
		folded[key] = path
	}
}

// buildSuffixes: what each file-name suffix of the house means, as the
// file's //go:build line: one meaning per suffix, a set named by its
// systems, "no" before what it leaves out. The
// GOOS names (_linux, _darwin, _windows, _js, _plan9) are Go's own rule.
var buildSuffixes = map[string]string{
	"unix":                 "unix", // every Unix Go knows, the BSDs too
	"other":                "!unix && !windows",
	"nounix":               "!unix",
	"nolinux":              "!linux",
	"nowindows":            "!windows",
	"linuxdarwin":          "linux || darwin",
	"nolinuxdarwin":        "!linux && !darwin",
	"nolinuxdarwinwindows": "!linux && !darwin && !windows",
	"unixnolinux":          "unix && !linux",
	"unixnolinuxdarwin":    "unix && !linux && !darwin",
}

// TestHouseBuildSuffixes: a Go file whose name ends in one of
// buildSuffixes has that build line (docs/architecture.md, "How the house
// is kept"), so a name says where the file builds.
func TestHouseBuildSuffixes(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		name := strings.TrimSuffix(strings.TrimSuffix(d.Name(), ".go"), "_test")
		suffix := name[strings.LastIndex(name, "_")+1:]
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
		require.NoError(t, err)
		expr := ""
		for _, g := range f.Comments {
			for _, c := range g.List {
				if line, ok := strings.CutPrefix(c.Text, "//go:build "); ok {
					expr = strings.TrimSpace(line)
				}
			}
		}
		if want, ok := buildSuffixes[suffix]; ok && strings.Contains(name, "_") {
			assert.Equal(t, want, expr, "%s: the suffix _%s means //go:build %s", path, suffix, want)
		}
		return nil
	})
	require.NoError(t, err)
}

type houseFile struct {
	fset *token.FileSet
	file *ast.File
}

func parseHouseFile(t *testing.T, path string) houseFile {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	require.NoError(t, err)
	return houseFile{fset, f}
}
