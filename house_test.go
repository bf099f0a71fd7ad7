package runnerstate

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// bridgeNames is all internal/bridge may export: what package daemon says
// of a starter, carried to Takeover in its context, which no user should
// set. Everything else the root lends daemon and the etcd module is its
// public API (docs/architecture.md, "The arrows point down").
var bridgeNames = []string{"Starter", "StarterOf", "WithStarter"}

// TestHouseBridgeIsSmall: internal/bridge exports bridgeNames and nothing
// else, and declares no package variable (a hook someone sets).
func TestHouseBridgeIsSmall(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("internal", "bridge", "*.go"))
	require.NoError(t, err)
	var names []string
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f := parseHouseFile(t, path)
		for _, d := range f.file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if d.Tok == token.VAR {
								assert.Failf(t, "a hook in the bridge", "%s: bridge declares the variable %s: publish it through the root's API, or pass a value", path, n.Name)
							}
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	assert.Equal(t, bridgeNames, names, "internal/bridge's exported names")
}

// TestHouseNoInitSetsAHook: no init function of the house's sources
// assigns to another package's variable: what one package needs of another
// is its API, or a value passed in (attempt.go's init, which reads this
// process's readiness descriptor, sets only its own package's state).
func TestHouseNoInitSetsAHook(t *testing.T) {
	for _, path := range houseSources(t) {
		f := parseHouseFile(t, path)
		imported := map[string]bool{}
		for _, imp := range f.file.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			name := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			imported[name] = true
		}
		for _, d := range f.file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != "init" {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				as, ok := n.(*ast.AssignStmt)
				if !ok {
					return true
				}
				for _, lhs := range as.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok {
						if id, ok := sel.X.(*ast.Ident); ok && imported[id.Name] {
							assert.Fail(t, "an init sets a hook", "%s: init sets %s.%s", path, id.Name, sel.Sel.Name)
						}
					}
				}
				return true
			})
		}
	}
}

// TestHouseEtcdImportsNoInternal: the etcd module, a module of its own,
// reaches the root only through its public API: none of its files (tests
// and examples included) imports an internal/ package of the root.
func TestHouseEtcdImportsNoInternal(t *testing.T) {
	const internal = "github.com/runnerstate/runnerstate/internal/"
	err := filepath.WalkDir("etcd", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			assert.False(t, strings.HasPrefix(strings.Trim(imp.Path.Value, `"`), internal), "%s imports %s", path, imp.Path.Value)
		}
		return nil
	})
	require.NoError(t, err)
}

// TestHouseTestSwitchesAreAtomic: a package variable that tests set (its
// name begins with "test") is a sync/atomic value, one way everywhere, so
// that setting it never races with a goroutine a test left running.
func TestHouseTestSwitchesAreAtomic(t *testing.T) {
	for _, path := range houseSources(t) {
		f := parseHouseFile(t, path)
		for _, d := range f.file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for _, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "test") {
						continue
					}
					atomic := false
					if sel, ok := vs.Type.(*ast.SelectorExpr); ok {
						atomic = isIdent(sel.X, "atomic")
					} else if ix, ok := vs.Type.(*ast.IndexExpr); ok {
						if sel, ok := ix.X.(*ast.SelectorExpr); ok {
							atomic = isIdent(sel.X, "atomic")
						}
					}
					assert.True(t, atomic, "%s: the test switch %s is not a sync/atomic value", path, n.Name)
				}
			}
		}
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// TestHouseNoRuntimeStack: no library code reads a goroutine's stack
// (runtime.Stack): Go gives goroutines no identity on purpose, and what
// needs one (the state lock's holder) is passed a token instead.
func TestHouseNoRuntimeStack(t *testing.T) {
	for _, path := range houseSources(t) {
		ast.Inspect(parseHouseFile(t, path).file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && isIdent(sel.X, "runtime") && sel.Sel.Name == "Stack" {
				assert.Fail(t, "runtime.Stack outside tests", "%s calls runtime.Stack", path)
			}
			return true
		})
	}
}

// TestHouseWineTestsUseTheHarnessTempDir: a test file that builds for
// Windows runs under Wine 8 in CI, where t.TempDir's cleanup fails
// ("Invalid function"); such tests use testharness.TempDir (or this
// package's tempDir), whose cleanup copes (docs/testing.md). The bench and
// etcd modules do not run under Wine.
func TestHouseWineTestsUseTheHarnessTempDir(t *testing.T) {
	windows := build.Default
	windows.GOOS, windows.GOARCH = "windows", "amd64"
	out, err := exec.Command("git", "ls-files", "*_test.go").Output()
	if err != nil {
		t.Skip("git ls-files: ", err)
	}
	for _, path := range strings.Fields(string(out)) {
		if strings.HasPrefix(path, "bench/") || strings.HasPrefix(path, "etcd/") {
			continue
		}
		if ok, err := windows.MatchFile(filepath.Dir(path), filepath.Base(path)); err != nil || !ok {
			continue
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.NotContains(t, string(data), "t."+"TempDir()", "%s builds for Windows, which runs it under Wine: use testharness.TempDir", path)
	}
}
