package main

import (
	"fmt"
	"path/filepath"
	"strings"
)

// lingerTable is the table of lingering's figures (package daemon's
// Options.Linger): an upgrade beside 100 streams, lingering against
// today's drain and tableflip in one run, and successors killed before
// ready. Beside the CPU hogs (busy) the latency target is the stretch, at
// most twice tableflip's window p99, and the killed successors' 100 ms
// target, which is the quiet machine's, is not marked.
func lingerTable(r *results, busy bool) string {
	rows := []row{lingerFailuresRow(r), lingerLatencyRow(r, busy), lingerKillRow(r, busy)}
	about := []string{}
	if cpu := r.config["cpu"]; cpu != "" {
		about = append(about, cpu)
	}
	about = append(about, r.runs()+" of each benchmark")
	return fmt.Sprintf("From `bench/%s` (%s):\n\n%s", filepath.Base(r.path), strings.Join(about, ", "), table(rows))
}

// linger is one way's figure in BenchmarkLinger.
func linger(r *results, impl, unit string) float64 {
	return r.median("Linger/impl="+impl, unit)
}

func lingerFailuresRow(r *results) row {
	way := func(impl string) string {
		return fmt.Sprintf("%s failed of %s requests, %s of %s streams cut early, two servers accepting in %s upgrades",
			whole(linger(r, impl, "failed")), count(linger(r, impl, "requests")),
			whole(linger(r, impl, "streams-cut")), count(linger(r, impl, "streams")), whole(linger(r, impl, "overlap-handoffs")))
	}
	most := func(unit string) float64 { return r.max("Linger/impl=lingering", unit) }
	return row{
		what: "upgrades beside streams: 8 client processes that connect per request and never retry, 100 streaming clients (a line every 100 ms for 3 s, then connect again), 10 upgrades 4 s apart",
		ours: fmt.Sprintf("lingering (`Linger` 5 s, asked to drain): %s; %s streams run to their end by an old server after its successor's first accept",
			way("lingering"), whole(linger(r, "lingering", "streams-after-handover"))),
		peer: fmt.Sprintf("today's drain (`Linger` 0): %s; tableflip: %s (%s streams finished by the old process)",
			way("drain"), way("tableflip"), whole(linger(r, "tableflip", "streams-after-handover"))),
		ratio: fmt.Sprintf("upgrades with two servers accepting: %s against tableflip's %s; streams kept through an upgrade as tableflip keeps them",
			whole(linger(r, "lingering", "overlap-handoffs")), whole(linger(r, "tableflip", "overlap-handoffs"))),
		// Every run, not the median: the targets are absolute.
		target: fmt.Sprintf("0 failed %s; 0 cut %s; 0 overlaps %s",
			mark(most("failed") == 0 && most("streams-failed") == 0), mark(most("streams-cut") == 0),
			mark(most("overlap-handoffs") == 0 && most("overlaps") == 0)),
	}
}

func lingerLatencyRow(r *results, busy bool) row {
	lat := func(impl string) string {
		stream := "no stream began in a window"
		if v := linger(r, impl, "stream-win-p99-µs"); v > 0 {
			stream = "a stream's first line in the windows p99 " + us(v)
		}
		return fmt.Sprintf("window p50 %s, p99 %s (windows of %s, p50); steady p50 %s, p99 %s; %s",
			us(linger(r, impl, "win-p50-µs")), us(linger(r, impl, "win-p99-µs")), us(linger(r, impl, "win-len-p50-µs")),
			us(linger(r, impl, "steady-p50-µs")), us(linger(r, impl, "steady-p99-µs")), stream)
	}
	w99, d99, t99 := linger(r, "lingering", "win-p99-µs"), linger(r, "drain", "win-p99-µs"), linger(r, "tableflip", "win-p99-µs")
	target := fmt.Sprintf("window p99 ≤ 25 ms %s", mark(w99 <= 25e3))
	if busy {
		target = fmt.Sprintf("window p99 ≤ 2× tableflip's (the stretch) %s", mark(w99 <= 2*t99))
	}
	return row{
		what:   "new connections' latency in the upgrade windows (to the successor's first accept, from the old server's last accept when lingering, its drain request with `Linger` 0, tableflip's SIGHUP) against steady state",
		ours:   "lingering: " + lat("lingering"),
		peer:   "today's drain: " + lat("drain") + "; tableflip: " + lat("tableflip"),
		ratio:  fmt.Sprintf("window p99: today's drain %s lingering's; lingering %s tableflip's; window p99 / steady p99: lingering %s, today's drain %s, tableflip %s", times(d99/w99), times(w99/t99), times(w99/linger(r, "lingering", "steady-p99-µs")), times(d99/linger(r, "drain", "steady-p99-µs")), times(t99/linger(r, "tableflip", "steady-p99-µs"))),
		target: target,
	}
}

func lingerKillRow(r *results, busy bool) row {
	m := func(unit string) float64 { return r.median("LingerKill", unit) }
	most := func(unit string) float64 { return r.max("LingerKill", unit) }
	p99 := m("back-p99-µs")
	target := fmt.Sprintf("the old server serving on after every kill %s; 0 refused %s; 0 failed %s", mark(most("old-server-left") == 0),
		mark(most("refused") == 0), mark(most("failed") == 0 && most("streams-failed") == 0 && most("streams-cut") == 0))
	if !busy {
		target += fmt.Sprintf("; accepting again within 100 ms (p99) %s", mark(p99 <= 100e3))
	}
	return row{
		what: fmt.Sprintf("a successor killed with SIGKILL at a random point before `Ready`, %s times a run, beside a lingering server and the same clients (medians of the runs)", whole(m("kills"))),
		ours: fmt.Sprintf("the old server left instead of serving on (as with `Linger` 0) after a kill in %s; %s refused, %s failed of %s requests, %s of %s streams cut; after the other kills the old server accepting again p50 %s, p99 %s, max %s (%s kills after the successor's `Listen` returned, %s inside it, %s before its process ran)",
			leftRuns(r), whole(m("refused")), whole(m("failed")), count(m("requests")), whole(m("streams-cut")), count(m("streams")),
			us(m("back-p50-µs")), us(p99), us(m("back-max-µs")),
			whole(m("kills-after-listen")), whole(m("kills-in-listen")), whole(m("kills-before-start"))),
		target: target,
	}
}

// leftRuns says in how many runs of BenchmarkLingerKill an old server left
// instead of serving on, and after how many kills in all: "0 of 5 runs",
// "2 of 5 runs (3 kills of 100)".
func leftRuns(r *results) string {
	left, kills := r.values[key{"LingerKill", "old-server-left"}], r.values[key{"LingerKill", "kills"}]
	if len(left) == 0 {
		r.missing = append(r.missing, "LingerKill old-server-left")
		return ""
	}
	runs, sum, all := 0, 0.0, 0.0
	for _, v := range left {
		if v > 0 {
			runs++
		}
		sum += v
	}
	for _, v := range kills {
		all += v
	}
	if runs == 0 {
		return fmt.Sprintf("0 of %d runs", len(left))
	}
	return fmt.Sprintf("%d of %d runs (%s kills of %s)", runs, len(left), whole(sum), whole(all))
}
