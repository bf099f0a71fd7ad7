//go:build unix || windows

package runnerstate

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// filesDoc is the page whose table lists the files of dirFiles.
const filesDoc = "docs/protocol.md"

// docsHomes are the words the files table uses for dirFile.home.
var docsHomes = map[string]dirHome{"runner": homeRunner, "scope": homeScope, "data root": homeDataRoot, "every": homeEvery}

// TestDocsListTheDirectorysFiles: the files table of docs/protocol.md
// lists the files of dirFiles, no more and no fewer, in the same order,
// each in the directory and with the mode the code gives it.
func TestDocsListTheDirectorysFiles(t *testing.T) {
	data, err := os.ReadFile(filesDoc)
	require.NoError(t, err)
	rows := filesTable(t, string(data))
	var want, got []string
	for _, f := range dirFiles {
		home := ""
		for word, h := range docsHomes {
			if h == f.home {
				home = word
			}
		}
		want = append(want, fmt.Sprintf("%s | %s | %04o", f.name, home, f.mode.Perm()))
	}
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s | %s | %s", r[0], r[1], r[2]))
	}
	assert.Equal(t, want, got, "the files table of %s (file | directory | mode) must list dirFiles (files.go): add a file to both", filesDoc)
}

// filesTable returns the cells of the rows of the table under the heading
// "## Files in a runner directory", the backticks of each cell removed.
func filesTable(t *testing.T, doc string) [][]string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n## Files in a runner directory\n")
	require.True(t, ok, "%s has a section \"Files in a runner directory\"", filesDoc)
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var rows [][]string
	header := 0
	for line := range strings.Lines(section) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		if header < 2 { // the header and its |---| line
			header++
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), " | ") {
			cells = append(cells, strings.Trim(strings.TrimSpace(c), "`"))
		}
		require.GreaterOrEqual(t, len(cells), 3, "row %q has a file, a directory and a mode", line)
		rows = append(rows, cells)
	}
	require.NotEmpty(t, rows, "the files table of %s has rows", filesDoc)
	return rows
}

// mdLinkRE is a relative markdown link: [text](target), target not a URL.
var mdLinkRE = regexp.MustCompile(`\]\(([^)#:\s]+)(#[^)\s]*)?\)`)

// TestDocsLinksResolve: every relative link of the README and of docs/*.md
// names a file of the repository, and every #anchor a heading of it.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	pages = append(pages, "README.md")
	for _, page := range pages {
		data, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, m := range mdLinkRE.FindAllStringSubmatch(string(data), -1) {
			target := filepath.Join(filepath.Dir(page), filepath.FromSlash(m[1]))
			_, err := os.Stat(target)
			if !assert.NoError(t, err, "%s links to %s", page, m[1]) || m[2] == "" {
				continue
			}
			linked, err := os.ReadFile(target)
			require.NoError(t, err)
			assert.Contains(t, anchors(string(linked)), m[2][1:], "%s links to %s%s: no such heading", page, m[1], m[2])
		}
	}
}

// anchors are the anchors GitHub gives the headings of a markdown page.
func anchors(doc string) []string {
	var out []string
	seen := map[string]int{}
	fence := false
	for line := range strings.Lines(doc) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ' || r == '-':
				b.WriteRune('-')
			case r == '_' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			a += "-" + strconv.Itoa(n)
		}
		seen[b.String()]++
		out = append(out, a)
	}
	return out
}

// TestREADMEDaemonStoryCompiles: the README's server and client, the Go
// blocks of its package daemon section, build against the packages as they
// are, placed in a program that gives them their imports and a handler.
func TestREADMEDaemonStoryCompiles(t *testing.T) {
	blocks := testharness.READMEDaemonBlocks(t, "README.md")
	program := "package main\n\n" + testharness.READMEDaemonImports + `
var handler http.Handler

func main() { _, _ = serve, client }

` + strings.Join(blocks, "\n\n") + "\n"
	buildOverlaid(t, program)
}

// TestREADMEQuickStartCompiles: the README's quick start is a program that
// builds against this package as it is (go build with an overlay that
// places it in the module, so nothing is written in the tree).
func TestREADMEQuickStartCompiles(t *testing.T) {
	data, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, qs, ok := strings.Cut(string(data), "\n## Quick start\n")
	require.True(t, ok, "the README has a quick start")
	_, code, ok := strings.Cut(qs, "\n```go\n")
	require.True(t, ok, "the quick start opens with a Go block")
	code, _, ok = strings.Cut(code, "\n```\n")
	require.True(t, ok, "the Go block ends")
	require.Contains(t, code, "package main")
	buildOverlaid(t, code+"\n")
}

// buildOverlaid builds program as the package internal/readmequickstart,
// with an overlay, so that nothing is written in the tree.
func buildOverlaid(t *testing.T, program string) {
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	_, out, err := testharness.BuildOverlaid(t, root, "internal/readmequickstart", program)
	assert.NoError(t, err, "the README's code does not build:\n%s\n%s", out, program)
}
