package main

import (
	"fmt"
	"path/filepath"
	"strings"
)

// blocks are what the report writes: each marker name in the docs, the
// results file it is written from, and the function that writes its text
// from the results. A target in a table is met (✓) or missed (✗) by the
// figure before it is rounded for display.
var blocks = []struct {
	name  string
	file  string // the results file it is written from: results (-in), daemon (-daemon), busy (-busy), crashloop (-crashloop), linger (-linger) or linger-busy (-linger-busy)
	write func(r *results) string
}{
	{"core", "results", coreTable},
	{"daemon", "daemon", daemonTable},
	{"daemon-busy", "busy", daemonTable},
	{"crashloop", "crashloop", crashLoopTable},
	{"linger", "linger", func(r *results) string { return lingerTable(r, false) }},
	{"linger-busy", "linger-busy", func(r *results) string { return lingerTable(r, true) }},
}

// coreTable is the table of the core library's figures: each row ours
// beside the raw syscalls or the peer a user would pick instead, measured
// in the same run.
func coreTable(r *results) string {
	var rows []row
	for _, f := range []func(*results) row{tryLockRow, runningRow, handoffRow, contentionRow, takeoverRow, standbyRow, watchRestartRow, statusRow} {
		rows = append(rows, f(r))
	}
	var about []string
	if cpu := r.config["cpu"]; cpu != "" {
		about = append(about, cpu)
	}
	if r.config["goos"] != "" {
		about = append(about, r.config["goos"]+"/"+r.config["goarch"])
	}
	about = append(about, r.runs()+" of each benchmark")
	return fmt.Sprintf("From `bench/results.txt` (%s), medians:\n\n%s", strings.Join(about, ", "), table(rows))
}

// daemonTable is the table of package daemon's figures: its upgrade beside
// binding anew and tableflip, Dial beside Start plus net.Dial (over TCP
// too, when the file was measured since that benchmark exists), and the
// idle exit, all from one run.
func daemonTable(r *results) string {
	rows := []row{upgradeFailuresRow(r), upgradeLatencyRow(r), dialRow(r)}
	if r.has("DialReadyTCP/impl=Dial", "ns/op") {
		rows = append(rows, dialTCPRow(r))
	}
	rows = append(rows, idleRow(r))
	about := []string{}
	if cpu := r.config["cpu"]; cpu != "" {
		about = append(about, cpu)
	}
	about = append(about, r.runs()+" of each benchmark")
	return fmt.Sprintf("From `bench/%s` (%s), medians:\n\n%s", filepath.Base(r.path), strings.Join(about, ", "), table(rows))
}

// upgrade is one upgrade scenario's figure.
func upgrade(r *results, impl, unit string) float64 {
	return r.median("Upgrade/impl="+impl, unit)
}

func upgradeFailuresRow(r *results) row {
	failed := upgrade(r, "daemon-handover", "failed")
	anewFailed, anewRefused := upgrade(r, "bind-anew", "failed"), upgrade(r, "bind-anew", "refused")
	return row{
		what: "upgrade under load: 8 client processes that never retry, 20 upgrades",
		ours: fmt.Sprintf("handing the sockets over (`Listen`, restart now): %s failed of %s requests; old and new accepting at once in %s upgrades, %s accepts by an old server after its successor's first",
			whole(failed), count(upgrade(r, "daemon-handover", "requests")), whole(upgrade(r, "daemon-handover", "overlap-handoffs")), whole(upgrade(r, "daemon-handover", "overlaps"))),
		peer: fmt.Sprintf("binding anew (`Takeover` + `net.Listen`): %s failed (%s refused or no socket) of %s; tableflip: %s failed, old and new accepting at once in %s of 20 upgrades (p50 %s each), %s accepts by the old after the new one's first",
			count(anewFailed), count(anewRefused), count(upgrade(r, "bind-anew", "requests")),
			whole(upgrade(r, "tableflip", "failed")), whole(upgrade(r, "tableflip", "overlap-handoffs")),
			us(upgrade(r, "tableflip", "overlap-p50-µs")), whole(upgrade(r, "tableflip", "overlaps"))),
		ratio: fmt.Sprintf("failed requests: %s against %s binding anew; upgrades with two servers accepting: %s against tableflip's %s",
			whole(failed), count(anewFailed), whole(upgrade(r, "daemon-handover", "overlap-handoffs")), whole(upgrade(r, "tableflip", "overlap-handoffs"))),
		// Every run, not the median: the targets are absolute.
		target: fmt.Sprintf("0 failed in every run %s; 0 overlaps in every run %s",
			mark(r.max("Upgrade/impl=daemon-handover", "failed") == 0),
			mark(r.max("Upgrade/impl=daemon-handover", "overlap-handoffs") == 0 && r.max("Upgrade/impl=daemon-handover", "overlaps") == 0)),
	}
}

func upgradeLatencyRow(r *results) row {
	lat := func(impl string) (win50, win99, st50, st99 float64) {
		return upgrade(r, impl, "win-p50-µs"), upgrade(r, impl, "win-p99-µs"), upgrade(r, impl, "steady-p50-µs"), upgrade(r, impl, "steady-p99-µs")
	}
	w50, w99, s50, s99 := lat("daemon-handover")
	aw50, aw99, _, as99 := lat("bind-anew")
	tw50, tw99, _, ts99 := lat("tableflip")
	return row{
		what: "the clients' latency in the upgrade windows (from the restart request, or tableflip's SIGHUP, to the successor's first accept) against steady state",
		ours: fmt.Sprintf("handing over: window p50 %s, p99 %s; steady p50 %s, p99 %s; a window lasts %s (p50): the old server's `Close` %s, then %s to the successor's accept loop",
			us(w50), us(w99), us(s50), us(s99), us(upgrade(r, "daemon-handover", "win-len-p50-µs")),
			us(upgrade(r, "daemon-handover", "close-p50-µs")), us(upgrade(r, "daemon-handover", "close-to-next-p50-µs"))),
		peer: fmt.Sprintf("binding anew, the requests that did not fail: window p50 %s, p99 %s, steady p99 %s, windows of %s; tableflip: window p50 %s, p99 %s, steady p99 %s, windows of %s (the old one serves in them)",
			us(aw50), us(aw99), us(as99), us(upgrade(r, "bind-anew", "win-len-p50-µs")),
			us(tw50), us(tw99), us(ts99), us(upgrade(r, "tableflip", "win-len-p50-µs"))),
		ratio: fmt.Sprintf("window p99 / steady p99: handing over %s, binding anew %s, tableflip %s; handing over's window p99 %s tableflip's",
			times(w99/s99), times(aw99/as99), times(tw99/ts99), times(w99/tw99)),
		target: fmt.Sprintf("window p99 ≤ 25 ms %s", mark(w99 <= 25e3)),
	}
}

func dialRow(r *results) row { return dialRowOf(r, "DialReady", "`Dial` to a ready server") }

func dialTCPRow(r *results) row {
	return dialRowOf(r, "DialReadyTCP", "`Dial` to a ready server over TCP (its peer checked through `sock_diag`)")
}

func dialRowOf(r *results, bench, what string) row {
	dial, start := r.median(bench+"/impl=Dial", "ns/op"), r.median(bench+"/impl=Start+net.Dial", "ns/op")
	inter := r.median(bench+"/impl=interleaved", "dial/start")
	return row{
		what:   what,
		ours:   fmt.Sprintf("`Dial` %s, %s allocs", ns(dial), whole(r.median(bench+"/impl=Dial", "allocs/op"))),
		peer:   fmt.Sprintf("`Start` on a ready runner + `net.Dial` of its endpoint %s, %s allocs", ns(start), whole(r.median(bench+"/impl=Start+net.Dial", "allocs/op"))),
		ratio:  fmt.Sprintf("%s; interleaved in one loop %s", times(dial/start), times(inter)),
		target: fmt.Sprintf("≤ 1.2× %s", mark(dial/start <= 1.2 && inter <= 1.2)),
	}
}

func idleRow(r *results) row {
	return row{
		what: "idle exit (`IdleTimeout` 100 ms)",
		ours: fmt.Sprintf("from the client's last close + `IdleTimeout` to `Running` showing the directory free: p50 %s, max %s; the server's own stamps: `Leaving` %s, `Close` returned %s",
			us(r.median("IdleExit", "p50-µs")), us(r.median("IdleExit", "max-µs")), us(r.median("IdleExit", "leaving-p50-µs")), us(r.median("IdleExit", "closed-p50-µs"))),
	}
}

func tryLockRow(r *results) row {
	impl := func(name string) float64 { return r.median("TryLock/impl="+name, "ns/op") }
	ours, raw, checked := impl("runnerstate"), impl("raw-syscalls"), impl("raw-syscalls-checked")
	gofrs, nightly := impl("gofrs-flock"), impl("nightlyone-lockfile")
	return row{
		what: "uncontended exclusive lock+unlock",
		ours: fmt.Sprintf("`TryLock` %s, %s allocs", ns(ours), whole(r.median("TryLock/impl=runnerstate", "allocs/op"))),
		peer: fmt.Sprintf("raw `open`+`flock`+`close` %s; the same with `O_NOFOLLOW` and the post-lock `fstat`+`lstat` %s; gofrs/flock %s; nightlyone/lockfile %s",
			ns(raw), ns(checked), ns(gofrs), ns(nightly)),
		ratio: fmt.Sprintf("%s raw, %s raw-with-the-checks (%s), %s gofrs/flock; the checks alone %s raw",
			times(ours/raw), times(ours/checked), pval(r.p("TryLock/impl=runnerstate", "TryLock/impl=raw-syscalls-checked", "ns/op")),
			times(ours/gofrs), times(checked/raw)),
		target: fmt.Sprintf("≤ 1.5× raw, or within 5 %% of the checks' floor %s, see below", mark(ours/raw <= 1.5 || ours/checked <= 1.05)),
	}
}

func runningRow(r *results) row {
	counts := []string{"0", "1000", "10000"}
	var ours, naive, ratio []string
	var worst, first, last float64
	for i, n := range counts {
		o := r.median("Running/locks="+n+"/impl=runnerstate-Running", "ns/op")
		g := r.median("Running/locks="+n+"/impl=gopsutil-naive", "ns/op")
		ours, naive, ratio = append(ours, ns(o)), append(naive, ns(g)), append(ratio, times(o/g))
		worst = max(worst, o/g)
		if i == 0 {
			first = o
		}
		last = o
	}
	return row{
		what: `"is a runner alive here?" (live, verified holder)`,
		ours: fmt.Sprintf("`Running` %s at 0 unrelated locks, %s at 1,000, %s at 10,000; %s allocs",
			ours[0], ours[1], ours[2], whole(r.median("Running/locks=0/impl=runnerstate-Running", "allocs/op"))),
		peer: fmt.Sprintf("gopsutil `NewProcess`+`IsRunning` on the recorded pid %s, %s and %s, %s allocs",
			naive[0], naive[1], naive[2], whole(r.median("Running/locks=0/impl=gopsutil-naive", "allocs/op"))),
		ratio: fmt.Sprintf("%s; 10,000 locks against 0: %s (%s)", strings.Join(ratio, ", "), times(last/first),
			pval(r.p("Running/locks=10000/impl=runnerstate-Running", "Running/locks=0/impl=runnerstate-Running", "ns/op"))),
		target: fmt.Sprintf("≤ 0.3× at every count %s; ≤ 1.2× at 10,000 %s, see below", mark(worst <= 0.3), mark(last/first <= 1.2)),
	}
}

func handoffRow(r *results) row {
	at := func(impl, unit string) float64 { return r.median("Handoff/impl="+impl, unit) }
	p50, p99 := at("runnerstate", "p50-µs"), at("runnerstate", "p99-µs")
	floor50, floor99, poll50 := at("flock-blocking", "p50-µs"), at("flock-blocking", "p99-µs"), at("gofrs-poll-10ms", "p50-µs")
	return row{
		what:   "cross-process handoff",
		ours:   fmt.Sprintf("`Lock(ctx)` p50 %s, p99 %s", us(p50), us(p99)),
		peer:   fmt.Sprintf("blocking `flock` p50 %s, p99 %s; gofrs/flock polling 10 ms p50 %s", us(floor50), us(floor99), us(poll50)),
		ratio:  fmt.Sprintf("p50 %s the floor; %s faster than polling", times(p50/floor50), times(poll50/p50)),
		target: fmt.Sprintf("p50 ≤ 3× %s, p99 ≤ 5 ms %s, see below", mark(p50/floor50 <= 3), mark(p99 <= 5000)),
	}
}

func contentionRow(r *results) row {
	at := func(impl, unit string) float64 { return r.median("Contention/impl="+impl, unit) }
	ours, floor := at("runnerstate", "locks/s"), at("flock-blocking", "locks/s")
	spread, floorSpread := at("runnerstate", "max/median"), at("flock-blocking", "max/median")
	return row{
		what: "8 processes × 1000 cycles on one path",
		ours: fmt.Sprintf("%s locks/s; max wait / median %s; p99 wait %s", count(ours), count(spread), us(at("runnerstate", "p99-wait-µs"))),
		peer: fmt.Sprintf("blocking `flock` %s locks/s; max / median %s; p99 wait %s",
			count(floor), count(floorSpread), us(at("flock-blocking", "p99-wait-µs"))),
		ratio: fmt.Sprintf("%s of the floor's throughput", pct(ours/floor)),
		target: fmt.Sprintf("≥ 50 %% %s; max ≤ 50× median %s (the floor: %s), see below",
			mark(ours/floor >= 0.5), mark(spread <= 50), mark(floorSpread <= 50)),
	}
}

func takeoverRow(r *results) row {
	ours, floor := r.median("Takeover/impl=runnerstate", "p50-µs"), r.median("Takeover/impl=old-runner-exit", "p50-µs")
	return row{
		what:   "takeover, old runner honours `now`",
		ours:   fmt.Sprintf("`Takeover` p50 %s", us(ours)),
		peer:   fmt.Sprintf("the old runner's own exit after the same request, p50 %s", us(floor)),
		ratio:  fmt.Sprintf("floor + %s", us(ours-floor)),
		target: fmt.Sprintf("≤ floor + 20 ms %s", mark(ours-floor <= 20e3)),
	}
}

func standbyRow(r *results) row {
	worst := r.median("StandbyWake", "max-µs")
	return row{
		what:   "standby wakes after the holder exits",
		ours:   fmt.Sprintf("`Standby` p50 %s, max %s", us(r.median("StandbyWake", "p50-µs")), us(worst)),
		target: fmt.Sprintf("≤ 50 ms %s, see below", mark(worst <= 50e3)),
	}
}

func watchRestartRow(r *results) row {
	p50 := r.median("WatchRestart", "p50-µs")
	return row{
		what:   "restart request delivered",
		ours:   fmt.Sprintf("`WatchRestart` p50 %s (including the fsynced write)", us(p50)),
		target: fmt.Sprintf("~50 ms %s", mark(p50 <= 50e3)),
	}
}

func statusRow(r *results) row {
	at := func(waiting, lines string) float64 {
		return r.median("Status/waiting="+waiting+"/lines="+lines, "ns/op")
	}
	none, ten, hundred, long := at("0", "0"), at("10", "0"), at("100", "0"), at("0", "10000")
	per10, per100 := (ten-none)/10, (hundred-none)/100
	return row{
		what:  "`Status` as work grows",
		ours:  fmt.Sprintf("0 waiting: %s; 10: %s; 100: %s; 10,000-line state file: %s", ns(none), ns(ten), ns(hundred), ns(long)),
		peer:  "itself at 0",
		ratio: fmt.Sprintf("%s per waiting starter at 100, %s at 10 (one identity verification each); a 10,000-line state file %s an empty one: state files are not read", ns(per100), ns(per10), times(long/none)),
		// Linear: a waiting starter costs the same at 100 as at 10, within
		// half again, and a long state file costs nothing more.
		target: fmt.Sprintf("linear %s", mark(per100 <= 1.5*per10 && per10 <= 1.5*per100 && long <= 1.2*none)),
	}
}

// crashLoopTable is the crash loop's table: a server that exits 1 at
// start, 8 client processes each dialling it every 100 ms, with Start's
// backoff and without it (NoBackoff: today's behaviour).
func crashLoopTable(r *results) string {
	m := func(impl, unit string) float64 { return r.median("CrashLoop/impl="+impl, unit) }
	secs := m("backoff", "seconds")
	starts, offStarts := m("backoff", "starts"), m("nobackoff", "starts")
	p99 := m("backoff", "window-p99-µs")
	rows := []row{{
		what: fmt.Sprintf("a server that exits 1 at start, 8 client processes each `Dial`ling it every 100 ms for %s s", whole(secs)),
		ours: fmt.Sprintf("with the backoff: %s processes started for %s `Dial`s; %s of them answered in a backoff window, p50 %s, p99 %s (the `Dial`s that waited for a start: p50 %s)",
			whole(starts), count(m("backoff", "dials")), count(m("backoff", "window-dials")), us(m("backoff", "window-p50-µs")), us(p99), us(m("backoff", "failed-p50-µs"))),
		peer: fmt.Sprintf("without it (`NoBackoff`, today's behaviour): %s processes started for %s `Dial`s, each waiting for a start to fail: p50 %s, p99 %s",
			count(offStarts), count(m("nobackoff", "dials")), us(m("nobackoff", "failed-p50-µs")), us(m("nobackoff", "failed-p99-µs"))),
		ratio:  fmt.Sprintf("%s fewer processes", times(offStarts/starts)),
		target: fmt.Sprintf("at most 10 processes %s; p99 in the window ≤ 10 ms %s", mark(starts <= 10), mark(p99 <= 10e3)),
	}}
	about := []string{}
	if cpu := r.config["cpu"]; cpu != "" {
		about = append(about, cpu)
	}
	about = append(about, r.runs()+" of each benchmark")
	return fmt.Sprintf("From `bench/%s` (%s):\n\n%s", filepath.Base(r.path), strings.Join(about, ", "), table(rows))
}
