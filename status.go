package runnerstate

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/fsinfo"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// Report is everything an operator needs to know about a runner directory,
// from Status. Scripts parse its JSON; the field names are stable.
type Report struct {
	Dir      string     `json:"dir"`             // the directory, made absolute
	Held     bool       `json:"held"`            // a runner holds the directory: its runner.lock, or its tree.lock when its lock file was lost
	Holder   Record     `json:"holder,omitzero"` // as Running reports it: the full record only when verified; omitted when none is known
	Verified bool       `json:"verified"`        // the holder's identity is confirmed alive
	Verdict  string     `json:"verdict,omitempty"`
	Restart  string     `json:"restart"`  // the pending restart mode, or ""
	Waiting  []Identity `json:"waiting"`  // live starters waiting in Takeover, oldest first
	Stale    []int      `json:"stale"`    // pids named in files that are not the live holder
	Orphans  []int      `json:"orphans"`  // processes of a gone runner's tree that still hold its tree lock
	Warnings []string   `json:"warnings"` // anything odd: corrupt files, foreign holders
	// Filesystem is the type of the directory's filesystem as mountinfo
	// names it (ext4, tmpfs, fuse.bindfs, nfs4...; macOS f_fstypename), or
	// omitted when it cannot be read.
	Filesystem string `json:"filesystem,omitempty"`
	// Starting is the child of a Start attempt in progress, while it lives
	// and is not ready yet (its Instance is empty: it is read before the
	// child picks one). Omitted when no attempt is in progress.
	Starting Identity `json:"starting,omitzero"`
	// StartFailures is the number of consecutive Start attempts whose
	// process went away before it was ready (start.json); omitted when 0.
	// A process that becomes ready resets it.
	StartFailures int `json:"start_failures,omitempty"`
	// NextStart is, while consecutive failures hold Start back (2 or more
	// of them), the time before which no Start starts a runner: the last
	// failure's end + 250 ms × 2^(failures-2), at most 30 s. Omitted when
	// nothing is held back.
	NextStart time.Time `json:"next_start,omitzero"`
	// LastExit is what is known of the last runner of the directory that
	// ended without releasing it, or of the last process a Start started
	// that went away before it was ready, the newest of them (see Exit);
	// nil when none is known. A clean release leaves it as it was.
	LastExit *Exit `json:"last_exit,omitempty"`
	// Lingering is the record of a server that handed the directory over
	// and still serves the connections it had accepted (linger.json), while
	// its process is not provably gone; nil when none lingers.
	Lingering *Lingering `json:"lingering,omitempty"`
}

// Status reports dir's state: whether a runner holds the lock and who it is,
// the pending restart request, the starters waiting to take over, the stale
// pids the files still name, the orphans of a previous runner's tree, the
// child of a Start attempt in progress (Starting, read from start.json), a
// server that lingers (Lingering, from linger.json), and warnings about
// anything odd. Like Running it creates nothing, modifies
// nothing and never makes an Acquire fail. Naming orphans scans every
// process's descriptors (only while a tree lock is held without a runner).
//
// On Linux, a holder of runner.lock that holds no tree.lock for longer
// than a short settle time (200 ms, which this call then waits) predates
// the tree lock (v0.1, below protocol 1's floor): a warning says so, and
// that its jobs are not tracked. That look reads the kernel's lock list
// only when the holder was not confirmed from runner.json and its fdinfo.
//
// Verdict, when the lock file names a holder, is the liveness verdict of that
// identity: "self", "alive", "dead", "stale", "foreign", "other-namespace" or
// "unverifiable".
//
// Errors: an error naming the path when dir exists but cannot be read, or
// runner.lock is a symlink or a directory. A missing dir reports not held.
// On a filesystem whose locks do not exclude (see ErrLockingUnsupported)
// there is no error: the report says not held, with the verdict of the
// identity runner.lock names ("unverifiable" when none) and a warning naming
// the filesystem; Filesystem is set wherever it can be read. A state file
// (runner.json, restart.json, gate.json, start.json) that says a protocol
// newer than this build's (docs/protocol.md) is no error either: Status
// reports what it can read, and a warning naming the file and both
// protocol numbers, which errors.Is cannot match: the calls that write or
// admit refuse such a directory with ErrNewerProtocol.
func Status(dir string) (Report, error) {
	r := Report{Dir: dir, Waiting: []Identity{}, Stale: []int{}, Orphans: []int{}, Warnings: []string{}}
	if err := checkDir("Status", dir); err != nil {
		return r, err
	}
	if abs, err := filepath.Abs(dir); err == nil {
		r.Dir = abs
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		// Windows says a path below a file is not found, not ENOTDIR.
		return r, pathError("refusing", dir, durable.ErrNotDir)
	}
	r.Filesystem = fsinfo.TypeOf(dir)
	if err := filelock.Judge(filepath.Join(dir, LockName)); err != nil {
		return refusedStatus(r, dir, err), nil
	}
	st := inspectRunner(dir)
	if st.err != nil {
		return r, st.err
	}
	st.elsewhereToo(dir)
	occ := st.occupancy()
	r.Held = occ.held()
	r.Verified = occ.verified()
	if st.named {
		r.Verdict = st.verdict.String()
	}
	rec, recState, recErr := readRecord(dir)
	if occ.held() {
		r.Holder = holderRecord(st, rec, recState)
		r.Warnings = append(r.Warnings, st.warnings(filepath.Join(dir, LockName))...)
		if r.Verified {
			if stopped, state := liveness.Stopped(liveness.Identity(st.holder)); stopped {
				r.Warnings = append(r.Warnings, fmt.Sprintf("the runner, pid %d, is stopped (state %c: SIGSTOP, a terminal's Ctrl-Z or a debugger): it holds %s but serves nothing until it is continued (SIGCONT)", st.holder.PID, state, dir))
			}
		}
		if w := belowFloor(dir, st); w != "" {
			r.Warnings = append(r.Warnings, w)
		}
	}
	if occ == occOrphans {
		pids, complete := orphans(dir, 0)
		r.Orphans = append(r.Orphans, pids...)
		r.Warnings = append(r.Warnings, orphansWarning(dir, pids, complete))
	}
	if recState == fileCorrupt {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s cannot be read and is ignored: %v", filepath.Join(dir, RecordName), recErr))
	}
	r.Starting = pendingChild(dir, r.Holder)
	a, haveAttempt := readAttempt(dir)
	if !haveAttempt {
		a, _, _ = readState(filepath.Join(dir, startName), parseAttempt) // an admission's last_exit alone
	}
	r.LastExit = lastExit(dir, r.Held, a, haveAttempt || a.LastExit != nil)
	if a, ok := a, haveAttempt; ok {
		r.StartFailures = a.carried()
		if at := a.retryAt(); time.Now().Before(at) && !r.Held {
			r.NextStart = at
		}
	}
	r.Stale = append(r.Stale, stalePIDs(dir, st)...)
	switch req, state, err := readRestartState(dir); {
	case state == fileOK && !req.void():
		r.Restart = req.Mode
	case state == fileCorrupt:
		r.Warnings = append(r.Warnings, fmt.Sprintf("%v; the request is ignored: remove it, or make a new one (RequestRestart)", err))
	}
	r.Lingering, r.Warnings = lingeringStatus(dir, r.Warnings)
	waiting, warn := waitingStarters(dir)
	r.Waiting = append(r.Waiting, waiting...)
	if warn != "" {
		r.Warnings = append(r.Warnings, warn)
	}
	if err := checkProtocol(dir, false); err != nil {
		r.Warnings = append(r.Warnings, err.Error()+"; what this report says of that file may be wrong")
	}
	r.Warnings = append(r.Warnings, voidWarnings(dir)...)
	r.Warnings = append(r.Warnings, untrustedWarning(dir)...)
	r.Warnings = append(r.Warnings, dirWarnings(dir)...)
	return r, nil
}

// orphansWarning is Status's warning for a tree.lock held without a runner,
// by the orphans pids (complete: every process could be read).
func orphansWarning(dir string, pids []int, complete bool) string {
	switch {
	case len(pids) > 0:
		return fmt.Sprintf("no runner holds %s, but processes of a previous runner's tree (%s) still hold %s: the directory stays busy until they exit; Takeover signals them", dir, pidList(pids), filepath.Join(dir, treeLockName))
	case !complete:
		return fmt.Sprintf("no runner holds %s, but %s is held by processes this user cannot see: the directory stays busy until they exit", dir, filepath.Join(dir, treeLockName))
	}
	return fmt.Sprintf("no runner holds %s, but %s is held: the directory stays busy until its holders exit", dir, filepath.Join(dir, treeLockName))
}

// refusedStatus is Status on a filesystem whose locks do not exclude: the
// lock cannot tell whether a runner holds dir, so the report says not held
// and warns why; the verdict is that of the identity runner.lock names, or
// "unverifiable" when it names none.
func refusedStatus(r Report, dir string, refused error) Report {
	r.Verdict = liveness.Unverifiable.String()
	if id, ok := lockFileNames(dir); ok {
		v, _ := liveness.Check(liveness.Identity(id))
		r.Verdict = v.String()
	}
	why := durable.Unwrap(public(refused)).Error()
	r.Warnings = append(r.Warnings, "cannot tell whether a runner holds "+dir+": "+why)
	r.Warnings = append(r.Warnings, dirWarnings(dir)...)
	return r
}

// dirWarnings reports what is odd about dir itself.
func dirWarnings(dir string) []string {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return nil
	}
	var warnings []string // a dir others can write: untrustedWarning (trust.go)
	if err := durable.CheckEntries(dir, stateLockName); err != nil {
		warnings = append(warnings, fmt.Sprintf("%s %v: until it is, no runner is admitted and no state is written", filepath.Join(dir, stateLockName), durable.Unwrap(err)))
	}
	return warnings
}
