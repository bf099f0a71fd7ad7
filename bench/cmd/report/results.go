package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// results holds one benchmark output file: every run's value of each
// benchmark and unit, and the file's configuration lines (cpu, goos, ...).
type results struct {
	path   string
	config map[string]string
	values map[key][]float64
	// missing collects the benchmarks and units a table asked for and the
	// file does not have, so that one error names them all.
	missing []string
	// rerun is the command that writes the file.
	rerun string
}

// reruns are the commands that write each results file, from the
// repository's root.
var reruns = map[string]string{
	"results":     "cd bench && go test -run '^$' -bench . -count 6 | tee results.txt",
	"daemon":      "cd bench && go test -run '^$' -bench 'Upgrade|DialReady|IdleExit' -count 6 | tee daemon-results.txt",
	"busy":        "cd bench; yes >/dev/null & yes >/dev/null & go test -run '^$' -bench 'Upgrade|DialReady|IdleExit' -count 6 | tee daemon-busy.txt; kill %1 %2",
	"crashloop":   "cd bench && BENCH_CRASHLOOP_DURATION=60s go test -run '^$' -bench CrashLoop -benchtime 1x | tee crashloop-results.txt",
	"linger":      "cd bench && BENCH_LINGER_UPGRADES=10 go test -run '^$' -bench Linger -benchtime 1x | tee linger-results.txt && BENCH_LINGER_UPGRADES=10 go test -run '^$' -bench LingerKill -benchtime 1x -count 5 | tee -a linger-results.txt",
	"linger-busy": "cd bench; yes >/dev/null & yes >/dev/null & BENCH_LINGER_UPGRADES=10 go test -run '^$' -bench Linger -benchtime 1x | tee linger-busy.txt; BENCH_LINGER_UPGRADES=10 go test -run '^$' -bench LingerKill -benchtime 1x -count 5 | tee -a linger-busy.txt; kill %1 %2",
}

// key names one measurement: a benchmark without its "Benchmark" prefix and
// its -GOMAXPROCS suffix ("TryLock/impl=raw-syscalls"), and a unit as the
// benchmark wrote it ("ns/op", "p50-µs").
type key struct{ name, unit string }

// loadResults reads a go test -bench output file, the format benchstat
// reads. It fails with an *fs.PathError when the file cannot be read or
// holds no benchmark result, and with benchfmt's *SyntaxError (which names
// the file and line) on a malformed result line.
func loadResults(path string) (*results, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res := &results{path: path, config: map[string]string{}, values: map[key][]float64{}, rerun: reruns["results"]}
	rd := benchfmt.NewReader(f, path)
	for rd.Scan() {
		switch rec := rd.Result().(type) {
		case *benchfmt.SyntaxError:
			return nil, rec
		case *benchfmt.Result:
			res.add(rec)
		}
	}
	if err := rd.Err(); err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if len(res.values) == 0 {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("no benchmark results in it: write it with go test -bench")}
	}
	return res, nil
}

// add files one result line's values under its name, in the units the
// benchmark wrote (benchfmt tidies ns/op into sec/op; OrigUnit keeps ns/op).
func (r *results) add(rec *benchfmt.Result) {
	for _, c := range rec.Config {
		if c.File {
			r.config[c.Key] = string(c.Value)
		}
	}
	base, parts := rec.Name.Parts()
	if n := len(parts); n > 0 && strings.HasPrefix(string(parts[n-1]), "-") {
		parts = parts[:n-1]
	}
	name := string(base) + string(slices.Concat(parts...))
	for _, v := range rec.Values {
		unit, value := v.OrigUnit, v.OrigValue
		if unit == "" {
			unit, value = v.Unit, v.Value
		}
		k := key{name, unit}
		r.values[k] = append(r.values[k], value)
	}
}

// sample returns the runs of one benchmark and unit, or nil (and notes
// what is missing) when the file has none.
func (r *results) sample(name, unit string) *benchmath.Sample {
	vs := r.values[key{name, unit}]
	if len(vs) == 0 {
		r.missing = append(r.missing, name+" "+unit)
		return nil
	}
	return benchmath.NewSample(slices.Clone(vs), &benchmath.DefaultThresholds)
}

// median is the median of one benchmark's runs in one unit, as benchstat
// reports it; 0 when the file has none (see missing).
func (r *results) median(name, unit string) float64 {
	s := r.sample(name, unit)
	if s == nil {
		return 0
	}
	return benchmath.AssumeNothing.Summary(s, 0.95).Center
}

// has reports whether the file has runs of the benchmark in the unit.
func (r *results) has(name, unit string) bool { return len(r.values[key{name, unit}]) > 0 }

// max is the largest of one benchmark's runs in one unit, for a target
// every run must meet; 0 when the file has none (see missing).
func (r *results) max(name, unit string) float64 {
	vs := r.values[key{name, unit}]
	if len(vs) == 0 {
		r.missing = append(r.missing, name+" "+unit)
		return 0
	}
	return slices.Max(vs)
}

// p is the p-value of the Mann-Whitney U-test benchstat uses to tell two
// benchmarks' runs apart in one unit; 1 when either is missing.
func (r *results) p(a, b, unit string) float64 {
	sa, sb := r.sample(a, unit), r.sample(b, unit)
	if sa == nil || sb == nil {
		return 1
	}
	return benchmath.AssumeNothing.Compare(sa, sb).P
}

// runs says how many runs each benchmark has: "6 runs" or "3 to 6 runs".
func (r *results) runs() string {
	lo, hi := 0, 0
	for _, vs := range r.values {
		if lo == 0 || len(vs) < lo {
			lo = len(vs)
		}
		hi = max(hi, len(vs))
	}
	if lo == hi {
		return fmt.Sprintf("%d runs", lo)
	}
	return fmt.Sprintf("%d to %d runs", lo, hi)
}

// err reports every measurement a table asked for that the file lacks.
func (r *results) err() error {
	if len(r.missing) == 0 {
		return nil
	}
	slices.Sort(r.missing)
	return &fs.PathError{Op: "read", Path: r.path, Err: fmt.Errorf("no results for %s: run the benchmarks again (%s)", strings.Join(slices.Compact(r.missing), ", "), r.rerun)}
}
