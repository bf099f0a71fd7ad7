package runnerstate

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
)

// StandbyOptions configures Standby. The zero value is the defaults.
type StandbyOptions struct {
	// Interval is how often WorkIsComplete is asked. Default 1s. The holder's
	// exit is noticed at once whatever the interval.
	Interval time.Duration
	// WorkIsComplete, when set, ends the standby with WorkCompleted as soon as
	// it returns true (the holder did the work this process stood by for).
	WorkIsComplete func() bool
	// Logger receives the one line naming the holder (Info); nil means the
	// package's logger (SetLogger), which by default does not print it.
	Logger *slog.Logger
}

// StandbyResult is how a standby ended. Its PreviousOwnerPID names the
// holder: the runner process that held the directory (not a data dir, as
// BusyError.Owner is).
type StandbyResult struct {
	Resumed          bool // the holder is gone: this process may take the directory
	PreviousOwnerPID int  // the pid of the runner that held the directory, when one was seen
	WorkCompleted    bool // WorkIsComplete returned true
}

// Standby waits while another live runner holds dir, for a process that may
// borrow the runner's work (a CLI that would run a job itself when no runner
// does). It logs once which pid holds dir, then returns Resumed, with that pid,
// as soon as the holder is gone (the kernel lock is free: it released, or it
// died) and so is its tree (no orphans of it hold tree.lock; see Inherit), or
// WorkCompleted when opts.WorkIsComplete says so. While a Takeover starter
// verified alive waits to be admitted, the directory is about to be its:
// Standby waits for it too (and then for the runner it becomes), rather than
// let its caller take the directory in the instant between the old runner's
// exit and that starter's admission. With no holder and no such starter it
// returns Resumed at once. It never takes the lock: take it with Acquire or
// Takeover after a Resumed.
//
// It wakes within milliseconds of the holder's exit: through the holder's pidfd
// and inotify on Linux, elsewhere by polling every 20 ms.
//
// Errors: when ctx ends first, a *BusyError naming the holder and wrapping
// ctx's error; an error naming the path when runner.lock is a symlink or a
// directory; ErrLockingUnsupported, at once, on a filesystem whose locks do
// not exclude (see ErrLockingUnsupported), where a free lock proves nothing.
func Standby(ctx context.Context, dir string, opts StandbyOptions) (StandbyResult, error) {
	if err := ownDir("Standby", dir); err != nil {
		return StandbyResult{}, err
	}
	if err := filelock.Judge(filepath.Join(dir, LockName)); err != nil {
		return StandbyResult{}, public(err) // a lock that cannot exclude never says the holder is gone
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = logger()
	}
	s := &standby{dir: dir, opts: opts, wait: newHolderWait(dir, opts.Interval, opts.WorkIsComplete)}
	defer s.wait.close()
	for {
		st := inspectRunner(dir)
		if st.err != nil {
			return s.res, st.err
		}
		occ := st.occupancy()
		free := occ == occFree
		if free {
			starter, waits := admittingStarter(dir)
			if !waits {
				s.res.Resumed = true
				return s.res, nil
			}
			infoOnceTo(s.opts.Logger, "standby-starter:"+dir, "runnerstate: standing by while a takeover starter is being admitted", "dir", dir, "starter", starter.PID)
		} else {
			s.follow(ctx, st)
		}
		if s.wait.checked() {
			s.res.WorkCompleted = true
			return s.res, nil
		}
		if err := s.wait.wait(ctx); err != nil {
			return s.res, runnerBusy(dir, occ, err)
		}
	}
}

// admittingStarter returns a Takeover starter that waits in dir's gate and is
// verified alive (not this process): the directory is about to be its, and a
// standby yields to it rather than take the directory in the instant between
// the old runner's exit and the starter's admission (the newest starter
// wins). A starter whose liveness cannot be verified is not waited for.
func admittingStarter(dir string) (Identity, bool) {
	g, _ := readGate(dir)
	for _, e := range g.Waiting {
		if v, _ := liveness.Check(e.Starter); v == liveness.Alive && !e.Void(time.Now()) {
			return Identity(e.Starter), true
		}
	}
	return Identity{}, false
}

// standby is one Standby's state: the holder it names, and its wait.
type standby struct {
	dir  string
	opts StandbyOptions
	res  StandbyResult
	wait *holderWait
}

// follow names a new holder once, and follows a verified one to wake when
// it exits.
func (s *standby) follow(ctx context.Context, st lockState) {
	occ := st.occupancy()
	if !occ.held() {
		infoOnceTo(s.opts.Logger, "standby-tree:"+s.dir, "runnerstate: standing by while processes of a previous runner's tree hold the directory", "dir", s.dir)
		return
	}
	if st.pid != s.res.PreviousOwnerPID {
		s.res.PreviousOwnerPID = st.pid
		s.opts.Logger.Info("runnerstate: standing by while another runner holds the directory", "dir", s.dir, "pid", st.pid, "verified", occ.verified())
	}
	if occ.verified() && st.verdict == liveness.Alive {
		s.wait.follow(ctx, liveness.Identity(st.holder))
	}
}

// holderWait is a standby's wait for the holder to go: it wakes when the
// files of the directory may have changed, when the holder process it
// follows exits, and when the caller's periodic check is due. Whether the
// holder has gone, Standby decides each time it wakes. It is used by one
// goroutine.
type holderWait struct {
	w         *dirwatch.Watcher
	exited    chan struct{} // signalled when the followed process exits
	holder    *liveness.ExitWatch
	check     func() bool
	interval  time.Duration
	nextCheck time.Time
}

// newHolderWait waits on dir. check, when not nil, is asked at once and then
// every interval (see checked).
func newHolderWait(dir string, interval time.Duration, check func() bool) *holderWait {
	return &holderWait{w: dirwatch.New(dir), exited: make(chan struct{}, 1), check: check, interval: interval, nextCheck: time.Now()}
}

// follow wakes the wait when the process id exits: it pins id (a process
// that cannot be pinned is not followed) unless it follows id.PID already,
// and stops following the process it followed before.
func (w *holderWait) follow(ctx context.Context, id liveness.Identity) {
	if w.holder != nil && w.holder.PID() == id.PID {
		return
	}
	w.holder.Stop()
	w.holder = nil
	if p, _, _ := liveness.Pin(id); p != nil {
		w.holder = liveness.WatchExit(ctx, p, w.exited)
	}
}

// checked asks the check when it is due, and reports whether it returned
// true.
func (w *holderWait) checked() bool {
	if w.check == nil || time.Now().Before(w.nextCheck) {
		return false
	}
	if w.check() {
		return true
	}
	w.nextCheck = time.Now().Add(w.interval)
	return false
}

// wait returns nil when the directory may have changed, the followed
// process exited, or the check is due; ctx.Err() when ctx ends first.
func (w *holderWait) wait(ctx context.Context) error {
	return w.w.Wait(ctx, w.untilCheck(), w.exited)
}

// untilCheck bounds the next wait by the next check (0: no bound).
func (w *holderWait) untilCheck() time.Duration {
	if w.check == nil {
		return 0
	}
	return max(time.Until(w.nextCheck), time.Millisecond)
}

// close stops following and watching.
func (w *holderWait) close() {
	w.holder.Stop()
	w.w.Close()
}
