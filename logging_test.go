//go:build unix || windows

package runnerstate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// captureDefault captures slog.Default() at every level for the length of
// a test, with the package's logger unset: what the package says to a
// program that set no logger. The log package's output, which
// slog.SetDefault redirects, is put back too.
func captureDefault(t *testing.T) *testharness.LogBuffer {
	t.Helper()
	b := &testharness.LogBuffer{}
	old, w, flags := slog.Default(), log.Writer(), log.Flags()
	SetLogger(nil)
	slog.SetDefault(slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() {
		slog.SetDefault(old)
		log.SetOutput(w)
		log.SetFlags(flags)
	})
	return b
}

// belowWarn are the lines of a text log under Warn.
func belowWarn(text string) []string {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "level=INFO") || strings.Contains(l, "level=DEBUG") {
			lines = append(lines, l)
		}
	}
	return lines
}

// With no logger set, the package's logger passes warnings on to
// slog.Default() (as it is when they are logged) and drops what it did;
// a logger the caller set gets both, and nil goes back to the default.
func TestDefaultLoggerKeepsOnlyWarnings(t *testing.T) {
	def := captureDefault(t)
	logger().Debug("runnerstate: debug line")
	logger().Info("runnerstate: info line")
	logger().With("dir", "d").WithGroup("g").Info("runnerstate: info line with attrs")
	logger().Warn("runnerstate: warn line", "dir", "d")
	logger().With("dir", "d").Error("runnerstate: error line")
	assert.Empty(t, belowWarn(def.String()), "nothing below Warn by default")
	assert.Contains(t, def.String(), `level=WARN msg="runnerstate: warn line" dir=d`)
	assert.Contains(t, def.String(), `level=ERROR msg="runnerstate: error line" dir=d`)

	set := &testharness.LogBuffer{}
	SetLogger(slog.New(slog.NewTextHandler(set, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer SetLogger(nil)
	logger().Info("runnerstate: info to the caller's logger")
	logger().Debug("runnerstate: debug to the caller's logger")
	Logger().Info("runnerstate: info through Logger, as package daemon logs")
	assert.Contains(t, set.String(), "info through Logger")
	assert.Contains(t, set.String(), "info to the caller's logger")
	assert.Contains(t, set.String(), "debug to the caller's logger")
	assert.NotContains(t, def.String(), "caller's logger")

	SetLogger(nil)
	logger().Info("runnerstate: info after SetLogger(nil)")
	Logger().Info("runnerstate: Logger's info after SetLogger(nil)")
	Logger().Warn("runnerstate: Logger's warning after SetLogger(nil)")
	assert.NotContains(t, def.String(), "info after SetLogger(nil)")
	assert.Contains(t, def.String(), "Logger's warning after SetLogger(nil)")
}

// A takeover from a client that set no logger says nothing below Warn:
// its steps (the restart it asked for, the holder it will not signal) go
// only to a logger the caller set, TakeoverOptions.Logger here.
func TestTakeoverIsQuietWithoutALogger(t *testing.T) {
	def := captureDefault(t)
	dir := tempDir(t)
	t.Setenv(envBehaviour, "obey")
	startChild(t, "runner", dir).Expect("acquired")

	ctx := background(t)
	release, err := Takeover(ctx, dir, TakeoverOptions{NoSignal: true})
	require.NoError(t, err, "the runner, asked, lets go")
	release()
	assert.Empty(t, belowWarn(def.String()), "a takeover with no logger set logs nothing below Warn:\n%s", def)
	assert.NotContains(t, def.String(), "will not signal", "NoSignal is the caller's own choice, not a warning")

	startChild(t, "runner", dir).Expect("acquired")
	var steps testharness.LogBuffer
	release, err = Takeover(ctx, dir, TakeoverOptions{NoSignal: true, Logger: slog.New(slog.NewTextHandler(&steps, nil))})
	require.NoError(t, err)
	release()
	assert.Contains(t, steps.String(), "takeover asked the runner to restart", "the caller's logger gets the steps")
	assert.Empty(t, belowWarn(def.String()), "and slog.Default() still nothing below Warn")
}

// Library texts (errors, log lines, Report warnings) name the call or the
// file, never a tool of this repository's examples, which a program built
// on the library does not have: no string literal outside examples/ and
// the tests names runnerctl.
func TestLibraryTextsNameNoExampleProgram(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "examples" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.Contains(lit.Value, "runnerctl") {
				t.Errorf("%s names runnerctl: %s", fset.Position(lit.Pos()), lit.Value)
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
}
