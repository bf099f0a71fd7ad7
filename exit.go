package runnerstate

import (
	"path/filepath"
	"strings"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
)

// Exit is what is known of how a runner of a directory ended without
// releasing it (a crash, a panic, kill -9, an OOM kill), or how the process
// a Start attempt started went away before it was ready: Report.LastExit,
// and StartError.Exit. A clean release leaves nothing to say.
//
// Trust: How is known only when a process of this library reaped the
// runner (the Start caller that started it, while it lived), else
// "unknown", never a guess; Gone is then when the end was found, not when
// it happened. Log is the end of the runner's log as it is now.
type Exit struct {
	Process  Identity  `json:"process"`           // who it was
	Program  string    `json:"program,omitempty"` // from its record
	Version  string    `json:"version,omitempty"`
	Admitted time.Time `json:"admitted,omitzero"` // its record's StartedAt
	Gone     time.Time `json:"gone"`              // when it ended, if known; else when it was found gone
	How      string    `json:"how"`               // "exit 2", "signal 9", or "unknown" (never a guess)
	Log      []string  `json:"log,omitempty"`     // the last lines of runner.log, at most 20 lines / 4 KiB
}

// maxExitLines bounds Exit.Log, in lines (maxLogTail bounds it in bytes).
const maxExitLines = 20

// logLines is the last lines of tail, at most maxExitLines and maxLogTail
// bytes, without the empty ones at its end; nil for none.
func logLines(tail string) []string {
	tail = strings.TrimRight(tail, "\r\n")
	if len(tail) > maxLogTail {
		tail = tail[len(tail)-maxLogTail:]
		if i := strings.IndexByte(tail, '\n'); i >= 0 {
			tail = tail[i+1:]
		}
	}
	if tail == "" {
		return nil
	}
	lines := strings.Split(tail, "\n")
	if len(lines) > maxExitLines {
		lines = lines[len(lines)-maxExitLines:]
	}
	return lines
}

// exitOfAttempt is the Exit of a's child once it went away before it was
// ready; nil otherwise.
func exitOfAttempt(a startAttempt) *Exit {
	if !a.Failed || a.Child.PID <= 0 {
		return nil
	}
	return &Exit{Process: Identity(a.Child), Gone: a.Ended, How: howOr(a.How), Log: logLines(a.LogTail)}
}

// howOr is how, or "unknown" when it is not known.
func howOr(how string) string {
	if how == "" {
		return "unknown"
	}
	return how
}

// exitOfRecord is the Exit of the runner whose record rec was left in dir
// by a runner that no longer holds it (the caller has found the directory
// free): how it ended and its log's end from the attempt a (have) when a
// started it and its caller recorded its end, else "unknown", found gone
// at now. Its log is cut where an attempt begun after its admission began
// appending to the same log: what follows is that attempt's child's.
func exitOfRecord(dir string, rec Record, a startAttempt, have bool, now time.Time) *Exit {
	e := &Exit{Process: rec.Process, Program: rec.Program, Version: rec.Version, Admitted: rec.StartedAt, Gone: now, How: "unknown"}
	if e.Process.PID == 0 {
		e.Process.PID = rec.PID
	}
	logPath, from, to := filepath.Join(dir, logName), int64(0), int64(-1)
	switch {
	case have && a.Child.PID > 0 && sameProcess(rec.Process, Identity(a.Child)):
		if a.How != "" && !a.Ended.IsZero() {
			e.How, e.Gone = a.How, a.Ended
		}
		logPath, from = a.Log, a.LogFrom
	case have && a.Over != nil && sameProcess(a.Over.Process, e.Process):
		from, to = a.Over.LogFrom, a.Over.LogTo
	case have && a.Seq > 0 && a.Log != "" && a.Began.After(rec.StartedAt) && samePath(a.Log, logPath):
		// A build without Over wrote start.json: a's child's lines follow
		// a.LogFrom, and earlier attempts' may precede it: nothing is sure.
		to = 0
	}
	e.Log = logLines(logTailBefore(logPath, from, to))
	return e
}

// samePath reports whether the paths a and b name the same file by name.
func samePath(a, b string) bool {
	a1, err1 := filepath.Abs(a)
	b1, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && a1 == b1
}

// lastExit is what is known of the last unclean end in dir, reading only:
// a record left behind while nothing holds the directory (held false),
// the failed attempt a (have), what start.json keeps: the newest wins, and
// of two of the same time the first.
func lastExit(dir string, held bool, a startAttempt, have bool) *Exit {
	var best *Exit
	consider := func(e *Exit) {
		if e != nil && (best == nil || e.Gone.After(best.Gone)) {
			best = e
		}
	}
	// The record left behind first: of the same end, it says more (the
	// program and version) than the attempt does.
	// A record whose end start.json keeps already (found by an earlier
	// Start or admission, the runner's lines cut from the log then) is
	// not found again: kept, its log is its own, and its Gone when it was
	// first found.
	if !held {
		rec, state, _ := readRecord(dir)
		kept := have && (a.LastExit != nil && sameProcess(a.LastExit.Process, rec.Process) ||
			a.Over != nil && a.Over.Found && sameProcess(a.Over.Process, rec.Process))
		if state == fileOK && rec.PID != 0 && !kept {
			consider(exitOfRecord(dir, rec, a, have, time.Now()))
		}
	}
	if have {
		if !a.Aside {
			consider(exitOfAttempt(a))
		}
		consider(a.LastExit)
	}
	return best
}

// recordLastExit keeps in start.json, at an admission (self's, holding the
// runner lock, under the state lock), the end of the runner whose record
// is still there, when start.lock can be had at once; when it is busy, the
// Start holding it records it before it starts anything. Best effort: a
// failure is logged.
func recordLastExit(dir string, self Identity) {
	rec, state, _ := readRecord(dir)
	if state != fileOK || rec.PID == 0 || sameProcess(rec.Process, self) {
		return
	}
	release, busy, err := tryStartLock(dir)
	if busy || err != nil {
		return
	}
	defer release()
	a, state, _ := readState(filepath.Join(dir, startName), parseAttempt)
	have := state == fileOK
	if state == fileCorrupt {
		return // never touched: Start sees it as no attempt, and replaces it
	}
	a.LastExit = exitOfRecord(dir, rec, a, have && a.Seq > 0, time.Now())
	data, err := protocolLine(a)
	if err == nil {
		err = durable.WriteVolatile(dir, startName, data)
	}
	if err != nil {
		logger().Info("runnerstate: could not record how the last runner ended", "dir", dir, "path", filepath.Join(dir, startName), "err", err)
	}
}
