package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The committed results and the page whose tables are written from them.
const (
	committedResults = "../../results.txt"
	committedDoc     = "../../../docs/benchmarks.md"
)

// runReport runs the command with args and returns its exit code and output.
func runReport(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs bytes.Buffer
	code = run(args, &out, &errs)
	return code, out.String(), errs.String()
}

// TestReportMatchesDocs: the tables of docs/benchmarks.md are what the
// report writes from bench/results.txt, so no figure there is edited by
// hand and no new results.txt is committed without them.
func TestReportMatchesDocs(t *testing.T) {
	code, _, stderr := runReport(t, "-check", "-in", committedResults, "-doc", committedDoc)
	assert.Equal(t, 0, code, "write the tables with `cd bench && go run ./cmd/report`: %s", stderr)
	assert.Empty(t, stderr)
}

// TestReportCheckCatchesAHandEdit: a figure edited by hand in a table fails
// the check, which writes nothing; the report then writes the table back,
// and the page is the committed one again, prose and all.
func TestReportCheckCatchesAHandEdit(t *testing.T) {
	want, err := os.ReadFile(committedDoc)
	require.NoError(t, err)
	begin := bytes.Index(want, []byte(beginMark+"core"+markTail))
	require.GreaterOrEqual(t, begin, 0, "the committed page marks the core table")
	// A figure changed by hand: "`TryLock` 2.7 µs" becomes "`TryLock` 12.7 µs".
	edited := slices.Concat(want[:begin], bytes.Replace(want[begin:], []byte("`TryLock` "), []byte("`TryLock` 1"), 1))
	require.NotEqual(t, want, edited, "the test edits a figure")
	doc := filepath.Join(t.TempDir(), "benchmarks.md")
	require.NoError(t, os.WriteFile(doc, edited, 0o644))

	code, stdout, stderr := runReport(t, "-check", "-in", committedResults, "-doc", doc)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, doc)
	assert.Contains(t, stderr, "the figures of table core differ from "+committedResults)
	got, err := os.ReadFile(doc)
	require.NoError(t, err)
	assert.Equal(t, string(edited), string(got), "-check writes nothing")

	code, stdout, stderr = runReport(t, "-in", committedResults, "-doc", doc)
	assert.Equal(t, 0, code, stderr)
	assert.Equal(t, "report: wrote core in "+doc+"\n", stdout)
	got, err = os.ReadFile(doc)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))

	code, stdout, _ = runReport(t, "-in", committedResults, "-doc", doc)
	assert.Equal(t, 0, code)
	assert.Empty(t, stdout, "nothing to write the second time")
}

// TestReportRefusesBadInput: a results file it cannot use, or a page whose
// markers are off, is refused with exit code 2 and a message naming the
// file and saying what to do; the page is left as it was.
func TestReportRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		return path
	}
	page := "# Benchmarks\n\n" + beginMark + "core" + markTail + "\n" + endMark + "core" + markTail + "\nprose\n"
	goodDoc := write("good.md", page)
	partial := write("partial.txt", "BenchmarkTryLock/impl=runnerstate-2 \t 100\t 2700 ns/op\t 144 B/op\t 3 allocs/op\n")
	full, err := os.ReadFile(committedResults)
	require.NoError(t, err)
	noBusy := filepath.Join(dir, "alone")
	require.NoError(t, os.Mkdir(noBusy, 0o755))
	alone := filepath.Join(noBusy, "results.txt") // no daemon-results.txt beside it
	require.NoError(t, os.WriteFile(alone, full, 0o644))
	for _, tc := range []struct {
		name, in, doc string
		says          []string
	}{
		{"no such results file", filepath.Join(dir, "absent.txt"), goodDoc, []string{"absent.txt", "no such file"}},
		{"no results in it", write("empty.txt", "goos: linux\nPASS\n"), goodDoc, []string{"empty.txt", "no benchmark results in it"}},
		{"a malformed result line", write("bad.txt", "BenchmarkX-2 \t 100\t many ns/op\n"), goodDoc, []string{"bad.txt:1"}},
		{"benchmarks missing", partial, goodDoc, []string{"partial.txt", "no results for", "TryLock/impl=raw-syscalls ns/op", "WatchRestart p50-µs", "go test -run '^$' -bench . -count 6"}},
		{"no daemon run beside it", alone, goodDoc, []string{filepath.Join(noBusy, "daemon-results.txt"), "no such file"}},
		{"no such page", committedResults, filepath.Join(dir, "absent.md"), []string{"absent.md", "no such file"}},
		{"no marked table", committedResults, write("bare.md", "# Benchmarks\n"), []string{"bare.md", "no table core", beginMark + "core" + markTail}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(tc.doc)
			code, stdout, stderr := runReport(t, "-in", tc.in, "-doc", tc.doc)
			assert.Equal(t, 2, code)
			assert.Empty(t, stdout)
			assert.True(t, strings.HasPrefix(stderr, "report: "), stderr)
			for _, s := range tc.says {
				assert.Contains(t, stderr, s)
			}
			after, _ := os.ReadFile(tc.doc)
			assert.Equal(t, before, after, "the page is left as it was")
		})
	}
}

// TestReportRefusesArguments: the command takes only flags.
func TestReportRefusesArguments(t *testing.T) {
	code, _, stderr := runReport(t, "-check", "docs/benchmarks.md")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "it takes only flags")
}

// TestSpliceMarkers: splice writes each table between its markers, a blank
// line before the end marker, and refuses markers it cannot pair, saying
// which marker to write.
func TestSpliceMarkers(t *testing.T) {
	b, e := func(n string) string { return beginMark + n + markTail + "\n" }, func(n string) string { return endMark + n + markTail + "\n" }
	texts := map[string]string{"one": "| a |\n", "two": "| b |\n"}
	got, changed, err := splice([]byte("x\n"+b("one")+"old\n"+e("one")+"y\n"+b("two")+"| b |\n\n"+e("two")), texts)
	require.NoError(t, err)
	assert.Equal(t, "x\n"+b("one")+"| a |\n\n"+e("one")+"y\n"+b("two")+"| b |\n\n"+e("two"), string(got))
	assert.Equal(t, []string{"one"}, changed, "only the table whose text changed")

	for _, tc := range []struct{ name, doc, says string }{
		{"a table not marked", b("one") + e("one"), "no table two: mark where it goes with " + strings.TrimSpace(b("two"))},
		{"an unknown table", b("one") + e("one") + b("two") + e("two") + b("three") + e("three"), `the report writes no table "three", only one, two`},
		{"a table marked twice", b("one") + e("one") + b("two") + e("two") + b("one") + e("one"), `table "one" is marked twice`},
		{"never closed", b("one") + e("one") + b("two"), `table "two" is never closed: end it with ` + strings.TrimSpace(e("two"))},
		{"closed unopened", e("one"), "closes no open table: put " + strings.TrimSpace(b("one"))},
		{"opened inside another", b("one") + b("two"), `opens inside table "one": close that one first with ` + strings.TrimSpace(e("one"))},
		{"closed by another name", b("one") + e("two"), `closes table "two", which is open: name it ` + strings.TrimSpace(e("one"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := splice([]byte(tc.doc), texts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.says)
		})
	}
}

// TestFigureFormats: figures show about two significant digits, in the unit
// that keeps them between 1 and 1000, as the docs' prose writes them.
func TestFigureFormats(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{ns(2007.5), "2.0 µs"},
		{ns(28584), "29 µs"},
		{ns(212049), "212 µs"},
		{ns(1685545), "1.7 ms"},
		{ns(750), "750 ns"},
		{ns(2.5e9), "2.5 s"},
		{ns(-2945e3), "-2.9 ms"},
		{us(708.8), "709 µs"},
		{us(0.5), "500 ns"},
		{count(174152), "174 k"},
		{count(6533), "6.5 k"},
		{count(21), "21"},
		{whole(3), "3"},
		{times(0.1949), "0.19×"},
		{times(3.009), "3.01×"},
		{times(151.1), "151×"},
		{pct(0.5436), "54 %"},
		{pval(0.00216), "p = 0.002"},
		{mark(true) + mark(false), "✓✗"},
	} {
		assert.Equal(t, tc.want, tc.got)
	}
}

// TestLeftRuns: the killed successors' row says in how many runs an old
// server left, and after how many kills of all; a file without the figure
// is named as missing.
func TestLeftRuns(t *testing.T) {
	runs := func(left ...float64) *results {
		r := &results{values: map[key][]float64{}}
		for _, v := range left {
			r.values[key{"LingerKill", "old-server-left"}] = append(r.values[key{"LingerKill", "old-server-left"}], v)
			r.values[key{"LingerKill", "kills"}] = append(r.values[key{"LingerKill", "kills"}], 20)
		}
		return r
	}
	assert.Equal(t, "0 of 5 runs", leftRuns(runs(0, 0, 0, 0, 0)))
	assert.Equal(t, "2 of 5 runs (3 kills of 100)", leftRuns(runs(0, 2, 0, 1, 0)))
	r := runs()
	assert.Empty(t, leftRuns(r))
	assert.Equal(t, []string{"LingerKill old-server-left"}, r.missing)
}
