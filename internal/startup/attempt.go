// Package startup is an attempt to start a process once, shared by every
// caller: callers in any number of processes that want the same directory's
// runner running find either a ready runner, or the one attempt in
// progress, or make that attempt themselves, and all of them learn its
// outcome (the runner's record, or how its process died).
//
// An attempt is serialised by a lock and described by a record file
// (Attempt), both of which the caller keeps: it reads and writes the record,
// takes the lock, and says what a ready runner is, through a Protocol. This
// package knows neither their names nor the shape of the runner's record,
// and logs nothing: what happened is told to the Protocol, or returned.
package startup

import (
	"errors"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// Attempt is the record of one attempt: the process started, where its
// output goes, and, once it died before it was ready, its exit status and
// log tail.
type Attempt struct {
	Seq     uint64            `json:"seq"`
	By      liveness.Identity `json:"by"`              // the caller that started it
	Child   liveness.Identity `json:"child"`           // the process started (Instance empty)
	Began   time.Time         `json:"began"`           // when it was started
	Log     string            `json:"log,omitempty"`   // where its output goes
	LogFrom int64             `json:"log_from"`        // the log's size when it began
	Failed  bool              `json:"failed,omitzero"` // it exited before it was ready
	// Ready is set by the process started, once it is ready (see
	// MarkReady): from then on the attempt is over, succeeded, even when
	// that process lets go of the directory and lingers before it exits.
	Ready    bool      `json:"ready,omitzero"`
	ExitCode int       `json:"exit_code"`
	Err      string    `json:"err,omitempty"`
	LogTail  string    `json:"log_tail,omitempty"`
	Ended    time.Time `json:"ended,omitzero"`
}

// Parse decodes an attempt record: one JSON object (durable.DecodeObject),
// or an error saying why not.
func Parse(data []byte) (Attempt, error) {
	var a Attempt
	err := durable.DecodeObject(data, &a)
	return a, err
}

// Pending reports whether a is in progress: its process lives, and it has
// neither failed nor been ready. (Whether it is ready now, before it has
// recorded so, is the caller's to see.)
func (a Attempt) Pending() bool {
	if a.Failed || a.Ready || a.Child.PID <= 0 {
		return false
	}
	v, _ := liveness.Check(a.Child)
	return v == liveness.Alive
}

// InProgress reports whether a has not ended: its process lives, or it has
// exited and the caller that started it, still alive, is about to record
// how (its reaper writes Ended, and Failed when it was not ready). An
// attempt whose process has been ready has ended.
func (a Attempt) InProgress() bool {
	if a.Failed || a.Ready || !a.Ended.IsZero() || a.Child.PID <= 0 {
		return false
	}
	return a.Pending() || verifiedAlive(a.By)
}

// Failure is a's outcome as a *Failure.
func (a Attempt) Failure() *Failure {
	f := &Failure{PID: a.Child.PID, ExitCode: a.ExitCode, Log: a.Log, LogTail: a.LogTail}
	if a.Err != "" {
		f.Err = errors.New(a.Err)
	}
	return f
}

// Failure is an attempt whose process did not become ready, as one caller
// learned it: it could not be started, it exited first, the caller's
// context ended first, or the caller refused it too. The caller turns it
// into its own error.
type Failure struct {
	PID      int    // the process started (0 if it could not be started)
	ExitCode int    // its exit status; 128+n when signal n ended it; -1 when it had not exited, or when this caller could not learn the status
	Log      string // the file its output went to ("" when the caller gave the streams)
	LogTail  string // the last lines written to that file since the attempt began, at most MaxLogTail bytes
	Err      error  // why: the exec error, the exit error, or ctx.Err()
}

// Error says the process did not become ready, and why; the caller's own
// error names the directory.
func (f *Failure) Error() string {
	if f.Err == nil {
		return "the process started did not become ready"
	}
	return "the process started did not become ready: " + f.Err.Error()
}

// Unwrap returns Err.
func (f *Failure) Unwrap() error { return f.Err }

// ErrRefused is a Failure's Err when the caller's Accept refused the runner
// its own attempt started.
var ErrRefused = errors.New("the runner this call started is refused by Accept too; it is left running")

// verifiedAlive reports whether id is verified alive.
func verifiedAlive(id liveness.Identity) bool {
	v, _ := liveness.Check(id)
	return v == liveness.Alive || v == liveness.Self
}
