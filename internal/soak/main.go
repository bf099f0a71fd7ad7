// Command soak runs the reliability tests at scale and prints their figures:
// the chaos test until it has admitted a given number of runners, the crash
// consistency test until a given number of SIGKILLs, and every fuzz target
// for a given number of executions. It is not run in CI (it takes about half
// an hour on two cores); run it from the module root:
//
//	go run ./internal/soak                          # 10,000 admissions, 1,000 kills, 1,000,000 execs per target
//	go run ./internal/soak -admissions 500 -kills 100 -execs 10000   # a quick look
//
// Each step runs `go test` on this module with the knobs the tests read
// (RUNNERSTATE_CHAOS, RUNNERSTATE_CHAOS_ADMISSIONS, RUNNERSTATE_CRASH_KILLS,
// RUNNERSTATE_CRASH_TIME, -fuzztime Nx). A step's whole output goes to a log
// file whose path is printed; the summary shows each step's figures line,
// how long it took and whether it passed. It exits 1 when any step failed.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run())
}

type step struct {
	name    string
	args    []string
	env     []string
	figures func(log []byte) string
}

func run() int {
	admissions := flag.Int("admissions", 10000, "chaos: run until this many starters were admitted")
	chaosMax := flag.Duration("chaos-max", time.Hour, "chaos: but no longer than this")
	kills := flag.Int("kills", 1000, "crash consistency: SIGKILLs to inject")
	crashMax := flag.Duration("crash-max", 30*time.Minute, "crash consistency: but no longer than this")
	execs := flag.Int("execs", 1000000, "fuzzing: executions per fuzz target")
	race := flag.Bool("race", false, "build the tests with the race detector (slower: fewer figures per minute)")
	flag.Parse()

	logs, err := os.MkdirTemp("", "runnerstate-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	raceFlag := []string{}
	if *race {
		raceFlag = []string{"-race"}
	}
	steps := []step{
		{
			name: "chaos",
			args: append(append([]string{"test"}, raceFlag...), "-count=1", "-timeout=0", "-v", "-run", "^TestChaos$", "."),
			env:  []string{"RUNNERSTATE_CHAOS=" + chaosMax.String(), "RUNNERSTATE_CHAOS_ADMISSIONS=" + strconv.Itoa(*admissions)},
			figures: func(log []byte) string {
				return figureLine(log, "chaos figures:", false) + "\n    " + figureLine(log, "chaos: ran", false)
			},
		},
		{
			name: "crash consistency",
			args: append(append([]string{"test"}, raceFlag...), "-count=1", "-timeout=0", "-v", "-run", "^TestCrashConsistency$", "."),
			env:  []string{"RUNNERSTATE_CRASH_KILLS=" + strconv.Itoa(*kills), "RUNNERSTATE_CRASH_TIME=" + crashMax.String()},
			figures: func(log []byte) string {
				return figureLine(log, "crash figures:", false)
			},
		},
	}
	targets, err := fuzzTargets()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak: listing the fuzz targets:", err)
		return 1
	}
	for _, ft := range targets {
		steps = append(steps, step{
			name: "fuzz " + ft.name,
			args: []string{"test", "-run=^$", "-fuzz=^" + ft.name + "$", "-fuzztime=" + strconv.Itoa(*execs) + "x", ft.pkg},
			figures: func(log []byte) string {
				return figureLine(log, "fuzz: elapsed:", true)
			},
		})
	}

	failed := 0
	var summary bytes.Buffer
	for i, s := range steps {
		logPath := filepath.Join(logs, fmt.Sprintf("%02d-%s.log", i, strings.ReplaceAll(s.name, " ", "-")))
		fmt.Printf("soak: %s (log: %s)\n", s.name, logPath)
		start := time.Now()
		out, err := runStep(s, logPath)
		took := time.Since(start).Round(time.Second)
		verdict := "ok"
		if err != nil {
			verdict = "FAILED: " + err.Error()
			failed++
		}
		fmt.Fprintf(&summary, "%-28s %-8s %s\n    %s\n", s.name, took, verdict, s.figures(out))
	}
	fmt.Printf("\nsoak summary (logs in %s):\n%s", logs, summary.String())
	if failed > 0 {
		fmt.Printf("soak: %d of %d steps failed\n", failed, len(steps))
		return 1
	}
	fmt.Printf("soak: all %d steps passed\n", len(steps))
	return 0
}

// runStep runs one step's go command, its output into logPath and kept in
// memory for the figures.
func runStep(s step, logPath string) ([]byte, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	cmd := exec.Command("go", s.args...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout = io.MultiWriter(f, &buf)
	cmd.Stderr = cmd.Stdout
	err = cmd.Run()
	return buf.Bytes(), err
}

type fuzzTarget struct{ pkg, name string }

// fuzzTargets lists every fuzz target of the module's packages, as go test
// -list does, so that a new target is soaked without editing this file.
func fuzzTargets() ([]fuzzTarget, error) {
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		return nil, err
	}
	var targets []fuzzTarget
	for _, pkg := range strings.Fields(string(out)) {
		list, err := exec.Command("go", "test", "-list", "^Fuzz", pkg).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pkg, err)
		}
		for _, name := range strings.Fields(string(list)) {
			if strings.HasPrefix(name, "Fuzz") {
				targets = append(targets, fuzzTarget{pkg: pkg, name: name})
			}
		}
	}
	return targets, nil
}

// figureLine returns the text of the first (or, with last, the last) line
// of log that contains marker, from the marker on, or "(no figures)".
func figureLine(log []byte, marker string, last bool) string {
	found := "(no figures)"
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if _, after, ok := strings.Cut(sc.Text(), marker); ok {
			found = marker + after
			if !last {
				break
			}
		}
	}
	return found
}
