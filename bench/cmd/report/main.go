// Command report writes the benchmark figures of docs/benchmarks.md from a
// benchmark output file (go test -bench output, the format benchstat reads),
// so that no figure there is copied by hand. Each table stands between two
// marker comments, which the report keeps, and the prose around them is
// left alone:
//
//	<!-- report:begin core -->
//	...
//	<!-- report:end core -->
//
// A figure is the median of the file's runs, as benchstat reports it, and a
// ratio compares two medians of the same run. Run it from bench/, after the
// benchmarks:
//
//	go test -run '^$' -bench . -count 6 | tee results.txt
//	go run ./cmd/report
//
// Package daemon's tables are written from runs of their own, so that the
// core table's run is not redone for them: daemon-results.txt (-daemon),
// and daemon-busy.txt (-busy), the same benchmarks beside two CPU hogs;
// both are read from beside -in unless named:
//
//	go test -run '^$' -bench 'Upgrade|DialReady|IdleExit' -count 6 | tee daemon-results.txt
//	yes >/dev/null & yes >/dev/null &
//	go test -run '^$' -bench 'Upgrade|DialReady|IdleExit' -count 6 | tee daemon-busy.txt
//	kill %1 %2
//
// The crash loop's table (Start's backoff beside today's behaviour) is
// written from crashloop-results.txt (-crashloop), a run of 60 s scenarios:
//
//	BENCH_CRASHLOOP_DURATION=60s go test -run '^$' -bench CrashLoop -benchtime 1x | tee crashloop-results.txt
//
// Lingering's tables (an upgrade beside 100 streams, lingering beside
// today's drain and tableflip, and successors killed before ready) are
// written from linger-results.txt (-linger) and linger-busy.txt
// (-linger-busy), the same beside two CPU hogs:
//
//	BENCH_LINGER_UPGRADES=10 go test -run '^$' -bench Linger -benchtime 1x | tee linger-results.txt
//	BENCH_LINGER_UPGRADES=10 go test -run '^$' -bench LingerKill -benchtime 1x -count 5 | tee -a linger-results.txt
//
// With -check it writes nothing and exits 1 when the docs differ from what it
// would write (TestReportMatchesDocs runs it so). It exits 2 on a file it
// cannot read or a marker it does not know, naming the file.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command, with its arguments and output given, for the test.
func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("report", flag.ContinueOnError)
	fl.SetOutput(stderr)
	in := fl.String("in", "results.txt", "the benchmark output file to read")
	daemonIn := fl.String("daemon", "", "the run of package daemon's benchmarks (default: daemon-results.txt beside -in)")
	busyIn := fl.String("busy", "", "the same beside two CPU hogs (default: daemon-busy.txt beside -in)")
	crashIn := fl.String("crashloop", "", "the run of the crash loop benchmark (default: crashloop-results.txt beside -in)")
	lingerIn := fl.String("linger", "", "the run of the lingering benchmarks (default: linger-results.txt beside -in)")
	lingerBusyIn := fl.String("linger-busy", "", "the same beside two CPU hogs (default: linger-busy.txt beside -in)")
	doc := fl.String("doc", "../docs/benchmarks.md", "the Markdown file whose marked tables to write")
	check := fl.Bool("check", false, "write nothing; exit 1 when the file differs from what the report would write")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "report: unexpected arguments %q: it takes only flags (-in, -daemon, -busy, -crashloop, -linger, -linger-busy, -doc, -check)\n", fl.Args())
		return 2
	}
	files := map[string]string{"results": *in, "daemon": *daemonIn, "busy": *busyIn, "crashloop": *crashIn, "linger": *lingerIn, "linger-busy": *lingerBusyIn}
	for name, beside := range map[string]string{"daemon": "daemon-results.txt", "busy": "daemon-busy.txt", "crashloop": "crashloop-results.txt",
		"linger": "linger-results.txt", "linger-busy": "linger-busy.txt"} {
		if files[name] == "" {
			files[name] = filepath.Join(filepath.Dir(*in), beside)
		}
	}
	changed, err := report(files, *doc, *check)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "report: %v\n", err)
		return 2
	case *check && len(changed) > 0:
		fmt.Fprintf(stderr, "report: %s: the figures of table %s differ from %s: write them with `cd bench && go run ./cmd/report`, never by hand\n",
			*doc, strings.Join(changed, ", "), *in)
		return 1
	case len(changed) > 0:
		fmt.Fprintf(stdout, "report: wrote %s in %s\n", strings.Join(changed, ", "), *doc)
	}
	return 0
}

// report writes each table from its results file (files, by the names
// blocks give: results, daemon, busy, crashloop, linger, linger-busy) into the Markdown file doc, or with
// check only compares them. It returns the names of the tables that were
// (or would be) rewritten.
func report(files map[string]string, doc string, check bool) ([]string, error) {
	texts := map[string]string{}
	for _, file := range []string{"results", "daemon", "busy", "crashloop", "linger", "linger-busy"} {
		res, err := loadResults(files[file])
		if err != nil {
			return nil, err
		}
		res.rerun = reruns[file]
		for _, b := range blocks {
			if b.file == file {
				texts[b.name] = b.write(res)
			}
		}
		if err := res.err(); err != nil {
			return nil, err
		}
	}
	old, err := os.ReadFile(doc)
	if err != nil {
		return nil, err
	}
	updated, changed, err := splice(old, texts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", doc, err)
	}
	if check || len(changed) == 0 {
		return changed, nil
	}
	fi, err := os.Stat(doc)
	if err != nil {
		return nil, err
	}
	return changed, os.WriteFile(doc, updated, fi.Mode().Perm())
}

const (
	beginMark = "<!-- report:begin "
	endMark   = "<!-- report:end "
	markTail  = " -->"
)

// splice replaces the text between each pair of marker lines in doc with
// texts[name], a blank line before the end marker. It returns the new
// document and the names whose text changed, in document order. Every name
// of texts must be marked exactly once, and every marker must be a name of
// texts, closed before the next one opens.
func splice(doc []byte, texts map[string]string) ([]byte, []string, error) {
	var out bytes.Buffer
	var changed []string
	seen := map[string]bool{}
	open, body := "", ""
	for line := range strings.Lines(string(doc)) {
		name, begin, end := marker(line)
		switch {
		case open == "" && end:
			return nil, nil, fmt.Errorf("%q closes no open table: put %s%s%s before it", strings.TrimSpace(line), beginMark, name, markTail)
		case open != "" && begin:
			return nil, nil, fmt.Errorf("%q opens inside table %q: close that one first with %s%s%s", strings.TrimSpace(line), open, endMark, open, markTail)
		case begin:
			if _, ok := texts[name]; !ok {
				return nil, nil, fmt.Errorf("%q: the report writes no table %q, only %s", strings.TrimSpace(line), name, strings.Join(slices.Sorted(maps.Keys(texts)), ", "))
			}
			if seen[name] {
				return nil, nil, fmt.Errorf("%q: table %q is marked twice: keep one of the two", strings.TrimSpace(line), name)
			}
			seen[name], open, body = true, name, ""
			out.WriteString(line)
		case open != "" && end && name != open:
			return nil, nil, fmt.Errorf("%q closes table %q, which is open: name it %s%s%s", strings.TrimSpace(line), name, endMark, open, markTail)
		case end:
			text := texts[open] + "\n"
			if body != text {
				changed = append(changed, open)
			}
			out.WriteString(text)
			out.WriteString(line)
			open = ""
		case open != "":
			body += line
		default:
			out.WriteString(line)
		}
	}
	if open != "" {
		return nil, nil, fmt.Errorf("table %q is never closed: end it with %s%s%s", open, endMark, open, markTail)
	}
	for _, name := range slices.Sorted(maps.Keys(texts)) {
		if !seen[name] {
			return nil, nil, errors.New("no table " + name + ": mark where it goes with " + beginMark + name + markTail + " and " + endMark + name + markTail)
		}
	}
	return out.Bytes(), changed, nil
}

// marker says whether line is a begin or end marker, and of which name.
func marker(line string) (name string, begin, end bool) {
	line = strings.TrimSpace(line)
	if !strings.HasSuffix(line, markTail) {
		return "", false, false
	}
	if rest, ok := strings.CutPrefix(line, beginMark); ok {
		return strings.TrimSuffix(rest, markTail), true, false
	}
	if rest, ok := strings.CutPrefix(line, endMark); ok {
		return strings.TrimSuffix(rest, markTail), false, true
	}
	return "", false, false
}
