package runnerstate

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// The backoff across callers: a runner that keeps failing at start is not
// started again in a tight loop, by this caller or any other. A failure is
// an attempt whose child went away without ever being ready, whoever
// notices it (the caller that reaps it: settle; or a later Start that finds
// the child gone: recordGone); a copy that package daemon started and that
// stepped aside for a newer server (markAside) is none. start.json counts
// the consecutive failures (startAttempt.Failures); after k >= 2 of them,
// nothing is started before the last one's end + retryAfter(k).

// How long the backoff waits after the second consecutive failure, and at
// most.
const (
	backoffBase = 250 * time.Millisecond
	backoffMax  = 30 * time.Second
)

// retryAfter is how long after the k-th consecutive failure's end no
// attempt is made: none for k < 2, then 250 ms × 2^(k-2), at most 30 s.
func retryAfter(k int) time.Duration {
	switch {
	case k < 2:
		return 0
	case k-2 >= 7: // 250 ms × 2^7 = 32 s: past the cap (and no shift overflows)
		return backoffMax
	}
	return min(backoffBase<<(k-2), backoffMax)
}

// retryAt is when a new attempt may be made after a, when a is a failure
// that backs off (the zero time when it is not).
func (a startAttempt) retryAt() time.Time {
	if !a.Failed || a.Aside || a.Ended.IsZero() {
		return time.Time{}
	}
	if d := retryAfter(a.Failures); d > 0 {
		return a.Ended.Add(d)
	}
	return time.Time{}
}

// carried is the count of consecutive failures a new attempt made after a
// starts from: a's, unless a's child was ready (it ended, and did not fail).
func (a startAttempt) carried() int {
	if a.Ready || !a.Ended.IsZero() && !a.Failed {
		return 0
	}
	return a.Failures
}

// fail records that a's child went away before it was ready, at end: one
// more consecutive failure, unless it stepped aside.
func (a *startAttempt) fail(end time.Time, code int, why, tail string) {
	a.Ended, a.Failed, a.ExitCode, a.Err, a.LogTail = end, true, code, why, tail
	if !a.Aside {
		a.Failures++
	}
}

// backingOff reports whether a look at the directory (waits: a runner
// holds it, not ready, which Start waits for rather than start one; a,
// have: start.json) finds this call in a backoff window, where it must not
// start a runner: wherever Start would start one, including in place of a
// ready holder that accept refuses; never for a call with NoBackoff.
func (c *startCall) backingOff(waits bool, a startAttempt, have bool) bool {
	if c.noBackoff || waits || !have {
		return false
	}
	at := a.retryAt()
	return !at.IsZero() && time.Now().Before(at)
}

// backedOff is the answer of a call in a's backoff window: a's *StartError
// (Failures, RetryAt) at once, unless ctx has a deadline later than
// RetryAt and the call has not waited yet: then it waits until RetryAt and
// returns errAgain, to look once more.
func (c *startCall) backedOff(ctx context.Context, a startAttempt) error {
	at := a.retryAt()
	if d, ok := ctx.Deadline(); !ok || !d.After(at) || c.waitedOut {
		return a.failure(c.abs)
	}
	c.waitedOut = true
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-ctx.Done():
		e := a.failure(c.abs)
		e.Err = fmt.Errorf("%w, waiting for the backoff to end at %s", ctx.Err(), at.Format(time.RFC3339Nano))
		return e
	case <-t.C:
		return errAgain
	}
}

// recordGone records, under start.lock, that the child of a (an attempt
// not in progress that no caller recorded the end of: its caller died, or
// could not write) is gone: a failure, unless the runner's record left
// behind says it was ready. It returns a as recorded.
func (c *startCall) recordGone(a startAttempt) startAttempt {
	if rec, state, _ := readRecord(c.dir); state == fileOK && rec.Ready && sameProcess(rec.Process, Identity(a.Child)) {
		a.Ended, a.Ready = time.Now(), true
	} else {
		a.fail(time.Now(), -1, "the process is gone, found by a later Start; how it ended is unknown", logTail(a.Log, a.LogFrom))
	}
	if err := writeAttempt(c.dir, a); err != nil {
		c.log.Info("runnerstate: could not record that the runner started is gone", "dir", c.dir, "path", filepath.Join(c.dir, startName), "err", err)
	}
	return a
}

// gone reports whether a, an attempt that is not in progress, has a child
// whose end nobody recorded.
func (a startAttempt) gone() bool {
	return a.Child.PID > 0 && !a.Failed && !a.Ready && a.Ended.IsZero()
}

// markAside records in dir's start.json that this process, the child of
// its attempt, stepped aside for a newer server (package daemon's copy,
// whose Takeover yields): its end is not a failure. An attempt of another
// process, or none, is left as it is.
func markAside(dir string) error {
	if readiness.attempt == 0 || readiness.forDir == "" || !sameDirPath(dir, readiness.forDir) {
		return nil
	}
	release, err := lockStart(dir)
	if err != nil {
		return err
	}
	defer release()
	a, ok, err := readAttemptErr(dir)
	if err != nil || !ok || a.Seq != readiness.attempt || a.Ready || a.Failed || !sameProcess(Identity(a.Child), Self()) {
		return err
	}
	a.Aside = true
	return writeAttempt(dir, a)
}
