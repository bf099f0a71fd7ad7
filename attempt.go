package runnerstate

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/spawn"
)

// A Start attempt, the mechanism under Start's decisions (start.go): its
// record start.json and its lock start.lock, the child it starts and the
// reaper that records how the child ended, the looks the callers of this
// process share, and, in the child, the readiness it owes the caller that
// started it.

// startAttempt is start.json: one attempt, the child it started, where the
// child's output goes, and, once the child died before it was ready, its
// exit status and log tail.
type startAttempt struct {
	Seq     uint64            `json:"seq"`
	By      liveness.Identity `json:"by"`              // the caller that started it
	Child   liveness.Identity `json:"child"`           // the process started (Instance empty)
	Began   time.Time         `json:"began"`           // when it was started
	Log     string            `json:"log,omitempty"`   // where its output goes
	LogFrom int64             `json:"log_from"`        // the log's size when it began
	Failed  bool              `json:"failed,omitzero"` // it exited before it was ready
	// Ready is set by the child, once it is ready (see markReady): from
	// then on the attempt is over, succeeded, even when the child lets go
	// of the directory and lingers before it exits.
	Ready    bool      `json:"ready,omitzero"`
	ExitCode int       `json:"exit_code"`
	Err      string    `json:"err,omitempty"`
	LogTail  string    `json:"log_tail,omitempty"`
	Ended    time.Time `json:"ended,omitzero"`
	// Failures counts the consecutive attempts whose child went away
	// before it was ready, this one's included once it has (backoff.go);
	// a child that becomes ready sets it to 0.
	Failures int `json:"failures,omitempty"`
	// Aside is set by the child when it stepped aside for a newer server
	// (markAside): its end is not a failure.
	Aside bool `json:"aside,omitzero"`
	// How is how the child ended, as the caller that reaped it saw it
	// ("exit 2", "signal 9"), whether it had been ready or not.
	How string `json:"how,omitempty"`
	// LastExit is the last unclean end of a runner of the directory, kept
	// by Start before it starts one and by an admission (exit.go).
	LastExit *Exit `json:"last_exit,omitempty"`
	// Over is the runner whose record was in the directory when this
	// attempt, or the first of those before it under the same record,
	// began, and where its lines in runner.log lie: what follows is the
	// attempts' children's (exit.go).
	Over *logOwner `json:"over,omitempty"`
}

// parseAttempt decodes start.json: one JSON object (durable.DecodeObject),
// or an error saying why not.
func parseAttempt(data []byte) (startAttempt, error) {
	var a startAttempt
	err := durable.DecodeObject(data, &a)
	return a, err
}

// pending reports whether a is in progress: its child lives, and it has
// neither failed nor been ready. (Whether it is ready now, before it has
// recorded so, is for probeStart to see.)
func (a startAttempt) pending() bool {
	if a.Failed || a.Ready || a.Child.PID <= 0 {
		return false
	}
	v, _ := liveness.Check(a.Child)
	return v == liveness.Alive
}

// inProgress reports whether a, an attempt of the directory abs, has not
// ended: its child lives, or it has exited and the caller that started it,
// still alive, is about to record how (its reaper writes Ended, and Failed
// when it was not ready). When that caller is this process, its reaper is
// known done once the child is no longer among ownChildren (it may have
// recorded nothing: see settle). An attempt whose child has been ready has
// ended.
func (a startAttempt) inProgress(abs string) bool {
	if a.Failed || a.Ready || !a.Ended.IsZero() || a.Child.PID <= 0 {
		return false
	}
	if a.pending() {
		return true
	}
	if sameProcess(Identity(a.By), Self()) {
		return ownChildOf(abs, a.Seq) != nil
	}
	return verifiedAlive(a.By)
}

// failure is a's outcome, for dir (absolute), as a *StartError.
func (a startAttempt) failure(abs string) *StartError {
	e := &StartError{Dir: abs, PID: a.Child.PID, ExitCode: a.ExitCode, Log: a.Log, LogTail: a.LogTail}
	if at := a.retryAt(); !at.IsZero() {
		e.Failures, e.RetryAt = a.Failures, at
	}
	e.Exit = exitOfAttempt(a)
	if a.Err != "" {
		e.Err = errors.New(a.Err)
	}
	return e
}

// errRefused is a *StartError's Err when the caller's Accept refused the
// runner its own attempt started.
var errRefused = errors.New("the runner this call started is refused by Accept too; it is left running")

// verifiedAlive reports whether id is verified alive.
func verifiedAlive(id liveness.Identity) bool {
	v, _ := liveness.Check(id)
	return v == liveness.Alive || v == liveness.Self
}

// readyChild reports whether rec, ready (probeStart's answer, or the
// record's own Ready), is a's child ready: the runner this attempt started
// is the ready holder, and the attempt is over.
func readyChild(a startAttempt, rec Record, ready bool) bool {
	return ready && a.Child.PID > 0 && sameProcess(rec.Process, Identity(a.Child))
}

// pendingChild is the child of dir's attempt in progress, for Status
// (Report.Starting): alive, not failed, and not (yet) the ready holder rec.
func pendingChild(dir string, rec Record) Identity {
	a, ok := readAttempt(dir)
	if !ok || !a.pending() || readyChild(a, rec, rec.Ready) {
		return Identity{}
	}
	return Identity(a.Child)
}

// readAttempt reads start.json; a missing or unreadable one is no attempt.
func readAttempt(dir string) (startAttempt, bool) {
	a, ok, _ := readAttemptErr(dir)
	return a, ok
}

// readAttemptErr is readAttempt that also says when start.json's path is
// unusable (a symlink, a directory, another non-regular file): no attempt
// can be recorded there until it is moved away.
func readAttemptErr(dir string) (startAttempt, bool, error) {
	a, state, err := readState(filepath.Join(dir, startName), parseAttempt)
	if state == fileCorrupt && unusablePath(err) {
		return startAttempt{}, false, err
	}
	return a, state == fileOK && a.Seq > 0, nil
}

// writeAttempt replaces start.json; the caller holds start.lock. It is not
// synced: an attempt describes live processes, which a power loss ends.
func writeAttempt(dir string, a startAttempt) error {
	data, err := protocolLine(a)
	if err != nil {
		return err
	}
	return public(durable.WriteVolatileToAll(dir, startName, data))
}

// tryStartLock takes start.lock without waiting: busy when another caller
// holds it.
func tryStartLock(dir string) (release func(), busy bool, err error) {
	l, err := filelock.TryLock(filepath.Join(dir, startLockName), filelock.Exclusive, 0o600)
	if errors.Is(err, filelock.ErrWouldBlock) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, public(err)
	}
	return l.Release, false, nil
}

// lockStart waits for start.lock, at most as long as for the state lock.
func lockStart(dir string) (func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), stateLockWait)
	defer cancel()
	l, err := waitLock(ctx, filepath.Join(dir, startLockName), filelock.Exclusive, 0o600, inspectLock)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// attemptEnv names, in a child's environment, the attempt that started it
// (its Seq): a hint for its logs and tests. This package takes it out of
// the environment when it is loaded (readiness.attempt keeps it), as
// spawn.TakeReadiness does the readiness variables.
const attemptEnv = "RUNNERSTATE_START_ATTEMPT"

// spawn starts the call's cmd as the attempt after prev (the zero value
// when there was none), holding start.lock, records it in start.json (with
// the last unclean end, found before anything is started: held says a
// runner holds the directory, whose record is then no leftover), and logs
// it.
func (c *startCall) spawn(prev startAttempt, held bool) (startAttempt, error) {
	seq := prev.Seq + 1
	a := startAttempt{Seq: seq, By: liveness.Current(), Log: c.logPath, Began: time.Now(), ExitCode: -1, Failures: prev.carried(),
		LastExit: lastExit(c.dir, held, prev, prev.Seq > 0 || prev.LastExit != nil)} // before the log is rotated
	var out *os.File
	if c.logPath != "" {
		f, size, err := c.openLog()
		if err != nil {
			return a, err
		}
		defer f.Close()
		out, a.LogFrom = f, size
		a.Over = c.over(prev, a.LogFrom, !held)
	}
	c.spawned = true
	own := &ownChild{}
	key := ownKey{c.abs, seq}
	started := make(chan struct{})
	env := []string{attemptEnv + "=" + strconv.FormatUint(seq, 10)}
	dir := c.dir
	dirKey, keyErr := durable.KeyOf(c.abs)
	child, err := spawn.Start(c.cmd, env, out, c.abs, func(ch *spawn.Child) {
		<-started
		if keyErr == nil {
			settle(c.abs, dirKey, a, own, ch)
		}
		ownChildren.Lock()
		delete(ownChildren.m, key)
		ownChildren.Unlock()
	})
	if err != nil {
		close(started)
		return a, &StartError{Dir: c.abs, ExitCode: -1, Log: c.logPath, Err: err}
	}
	own.child = child
	a.Child = liveness.Identity{PID: child.PID}
	if id, err := liveness.Lookup(child.PID); err == nil {
		a.Child = id
	}
	ownChildren.Lock()
	ownChildren.m[key] = own
	ownChildren.Unlock()
	if err := writeAttempt(dir, a); err != nil {
		c.log.Info("runnerstate: could not record the start attempt; other callers may not see it", "dir", dir, "path", filepath.Join(dir, startName), "err", err)
	}
	close(started)
	c.log.Info("runnerstate: started the runner", "dir", dir, "pid", child.PID, "log", c.logPath)
	return a, nil
}

// logOwner is the runner whose record was in the directory when Start
// attempts began appending to its log (runner.log), and its lines there:
// from LogFrom to LogTo. Found: the directory was free then, its end found
// (and kept in the attempt's LastExit, unless a newer one replaced it).
type logOwner struct {
	Process Identity `json:"process"`
	LogFrom int64    `json:"log_from"`
	LogTo   int64    `json:"log_to"`
	Found   bool     `json:"found,omitzero"`
}

// over is the attempt's logOwner, its log opened at size from, after prev;
// found says the directory is free. Nil unless the log is runner.log and a
// record is there.
func (c *startCall) over(prev startAttempt, from int64, found bool) *logOwner {
	if !samePath(c.logPath, filepath.Join(c.dir, logName)) {
		return nil
	}
	rec, state, _ := readRecord(c.dir)
	if state != fileOK || rec.PID == 0 {
		return nil
	}
	id := rec.Process
	if id.PID == 0 {
		id.PID = rec.PID
	}
	if o := prev.Over; o != nil && sameProcess(o.Process, id) {
		o2 := *o
		if from < o2.LogTo { // rotated since: its lines are in no log read
			o2.LogFrom, o2.LogTo = 0, 0
		}
		o2.Found = o2.Found || found
		return &o2
	}
	o := &logOwner{Process: id, LogTo: from, Found: found}
	if prev.Child.PID > 0 && sameProcess(id, Identity(prev.Child)) && samePath(prev.Log, c.logPath) && prev.LogFrom <= from {
		o.LogFrom = prev.LogFrom // the runner prev started: its lines begin there
	}
	return o
}

// openLog opens the log, rotated first when it is over the call's bound;
// the caller holds start.lock, so concurrent Starts never rotate twice.
func (c *startCall) openLog() (*os.File, int64, error) {
	if err := spawn.RotateLog(c.logPath, c.logMax, logKeep); err != nil {
		c.log.Warn("runnerstate: could not rotate the runner's log; appending to it as it is", "dir", c.dir, "path", c.logPath, "err", err)
	}
	f, size, err := spawn.OpenLog(c.logPath)
	return f, size, public(err)
}

// settle records in dir's start.json that attempt a's child exited: when,
// and, when it exited before it was ready, its exit status and log tail,
// for the callers that wait on it. Called by the reaper once the child has
// exited, in the caller's process, maybe long after Start returned, so it
// creates nothing: it takes start.lock only if it is there
// (lockExistingStart), rewrites start.json in place (durable.Rewrite), and
// records nothing when the directory is no longer the one key names
// (removed, or replaced by another at its path), nor on Windows, where the
// descriptors it would open block the directory's removal.
func settle(abs string, key durable.Key, a startAttempt, own *ownChild, c *spawn.Child) {
	wasReady := own.ready.Load()
	select {
	case <-c.Ready():
		wasReady = true
	default:
	}
	if runtime.GOOS == "windows" || !sameDir(abs, key) {
		return
	}
	release, err := lockExistingStart(abs)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errors.ErrUnsupported) || errors.Is(err, filelock.ErrReplaced) {
		return // the directory is going, and its attempt with it
	}
	if err != nil {
		notSettled(abs, c.PID, err)
		return
	}
	defer release()
	if !sameDir(abs, key) {
		return // replaced while this waited for its lock
	}
	err = rewriteAttempt(abs, func(cur startAttempt) (startAttempt, bool) {
		if cur.Seq != a.Seq || cur.By.Instance != a.By.Instance || !sameProcess(Identity(cur.Child), Identity(a.Child)) || cur.Failed || !cur.Ended.IsZero() {
			return cur, false
		}
		cur.How = c.How()
		if wasReady || cur.Ready {
			cur.Ended, cur.Failures = time.Now(), 0
			return cur, true
		}
		why := "exited before it was ready"
		if err := c.WaitErr(); err != nil {
			why = err.Error()
		}
		cur.fail(time.Now(), c.ExitCode(), why, logTail(cur.Log, cur.LogFrom))
		return cur, true
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		notSettled(abs, c.PID, err)
	}
}

// sameDir reports whether the directory at abs is still the one key names.
func sameDir(abs string, key durable.Key) bool {
	k, err := durable.KeyOf(abs)
	return err == nil && k == key
}

// lockExistingStart takes start.lock, waiting at most as long as for the
// state lock, only while it exists: it never creates it.
func lockExistingStart(dir string) (func(), error) {
	path := filepath.Join(dir, startLockName)
	deadline := time.Now().Add(stateLockWait)
	for wait := time.Millisecond; ; wait = min(2*wait, startPoll) {
		l, err := filelock.TryLockExisting(path, filelock.Exclusive)
		if err == nil {
			return l.Release, nil
		}
		if !errors.Is(err, filelock.ErrWouldBlock) || time.Now().After(deadline) {
			return nil, public(err)
		}
		// Its holders (a caller deciding, a child marking itself ready)
		// hold it for a few system calls: this goroutine has nobody
		// waiting on it, and a poll costs less than a parked locker
		// that could create the file.
		time.Sleep(wait)
	}
}

// rewriteAttempt rewrites start.json in place (durable.Rewrite: no file
// created, none replaced), as update says; the caller holds start.lock, so
// no reader that takes it sees the rewrite half done, and a reader that
// does not take it treats a torn start.json as no attempt.
func rewriteAttempt(dir string, update func(startAttempt) (startAttempt, bool)) error {
	var encodeErr error
	err := durable.Rewrite(filepath.Join(dir, startName), maxRecordSize, func(old []byte) ([]byte, bool) {
		cur, err := parseAttempt(old)
		if err != nil {
			return nil, false
		}
		cur, write := update(cur)
		if !write {
			return nil, false
		}
		data, err := protocolLine(cur)
		if err != nil {
			encodeErr = err
			return nil, false
		}
		return data, true
	})
	if err == nil {
		err = encodeErr
	}
	return public(err)
}

// notSettled logs that the exit of an attempt's child pid could not be
// recorded (the reaper has no call's logger: its call may have returned).
func notSettled(dir string, pid int, err error) {
	logger().Info("runnerstate: could not record that the runner started has exited", "dir", dir, "pid", pid, "err", err)
}

// exitFailure is the failure of attempt a, whose child exited before it
// was ready, as this process learned it.
func exitFailure(abs string, a startAttempt, code int, err error) *StartError {
	if err == nil {
		err = errors.New("exited before it was ready")
	}
	return &StartError{Dir: abs, PID: a.Child.PID, ExitCode: code, Log: a.Log, LogTail: logTail(a.Log, a.LogFrom), Err: err}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// watchAttempt gives what tells that a's child exited, and that it said
// it is ready (own only: the attempt this process started); stop ends the
// watch.
func watchAttempt(ctx context.Context, a startAttempt, own *ownChild) (exited, ready <-chan struct{}, stop func()) {
	if own != nil {
		return own.child.Exited(), own.child.Ready(), func() {}
	}
	if p, _, _ := liveness.Pin(a.Child); p != nil {
		ew := liveness.WatchExit(ctx, p, nil)
		return ew.Exited(), nil, ew.Stop
	}
	return closedChan, nil, func() {}
}

// maxLogTail bounds a *StartError's LogTail.
const maxLogTail = 4 << 10

// logTail is the last lines written to the log at path from offset on, at
// most maxLogTail bytes (durable.ReadTail: the rest is not read); "" when
// there is no log or it cannot be read.
func logTail(path string, from int64) string {
	return logTailBefore(path, from, -1)
}

// logTailBefore is logTail of the log cut at offset to (to < 0: not cut).
func logTailBefore(path string, from, to int64) string {
	if path == "" {
		return ""
	}
	data, err := durable.ReadTailBefore(path, from, to, maxLogTail+1)
	if err != nil || len(data) == 0 {
		return ""
	}
	if len(data) > maxLogTail {
		data = data[len(data)-maxLogTail:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 && i < len(data)-1 {
			data = data[i+1:]
		}
	}
	return string(data)
}

// ownChildren are the attempts this process started and whose child still
// lives, by directory and sequence, so that its other callers learn the
// exit status too.
var ownChildren = struct {
	sync.Mutex
	m map[ownKey]*ownChild
}{m: map[ownKey]*ownChild{}}

type ownKey struct {
	dir string
	seq uint64
}

// ownChild is a child this process started.
type ownChild struct {
	child *spawn.Child
	ready atomic.Bool // seen ready (its descriptor, or its record)
}

func ownChildOf(abs string, seq uint64) *ownChild {
	ownChildren.Lock()
	defer ownChildren.Unlock()
	return ownChildren.m[ownKey{abs, seq}]
}

// allReaped reports whether every child this process started for the
// directory abs has exited and been reaped.
func allReaped(abs string) bool {
	ownChildren.Lock()
	defer ownChildren.Unlock()
	for k := range ownChildren.m {
		if k.dir == abs {
			return false
		}
	}
	return true
}

// startLook is one look at a directory: probeStart's answer (with the
// call's bound on an unreadable record) and start.json.
type startLook struct {
	rec         Record
	held, ready bool
	err         error
	att         startAttempt
	haveAtt     bool
}

// startLooks holds the last look at each directory a Start call of this
// process is on, which every caller woken before it began may use: a crowd
// of callers in one process woken by one change looks once, not once each.
// A directory's entry lives while a call is on it (joinLooks), so it holds
// no more directories than there are Start calls running.
var startLooks = struct {
	sync.Mutex
	m map[string]*lookShare // absolute dir -> its last look
}{m: make(map[string]*lookShare)}

// lookShare is the last look at one directory.
type lookShare struct {
	mu    sync.Mutex
	at    time.Time // when the look began
	l     startLook
	calls int // the Start calls on the directory (under startLooks' lock)
}

// joinLooks makes a Start call on the directory abs one that shares its
// looks, until leave: the last call to leave drops the directory's entry.
func joinLooks(abs string) (leave func()) {
	startLooks.Lock()
	defer startLooks.Unlock()
	sh := startLooks.m[abs]
	if sh == nil {
		sh = &lookShare{}
		startLooks.m[abs] = sh
	}
	sh.calls++
	return func() {
		startLooks.Lock()
		defer startLooks.Unlock()
		if sh.calls--; sh.calls == 0 {
			delete(startLooks.m, abs)
		}
	}
}

// lookAfter returns a look at the directory that began after woke: a
// concurrent caller's, or its own (a call that has not joined the
// directory's looks always looks itself).
func (c *startCall) lookAfter(woke time.Time) startLook {
	startLooks.Lock()
	sh := startLooks.m[c.abs]
	startLooks.Unlock()
	if sh == nil {
		sh = &lookShare{}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.at.After(woke) {
		at := time.Now()
		var l startLook
		l.rec, l.held, l.ready, l.err = c.probe()
		l.att, l.haveAtt, _ = readAttemptErr(c.dir)
		sh.at, sh.l = at, l
	}
	l := sh.l
	l.rec.Specs = slices.Clone(l.rec.Specs) // the caller's own copy
	l.rec.Meta = slices.Clone(l.rec.Meta)
	return l
}

// The readiness a child owes the caller that started it: the descriptor it
// was given, taken from the environment when the package is loaded (so
// that no process it starts inherits it), and written once, when the
// directory it was started for is ready.
var readiness struct {
	sync.Mutex
	f       *os.File
	forDir  string
	attempt uint64 // the Seq of the attempt that started this process (attemptEnv), 0 when none did
	told    bool   // signalReady has answered true
}

// The variables an attempt gave this process are read once, here, and
// removed from its environment, so that none reaches a process it starts.
func init() {
	readiness.f, readiness.forDir = spawn.TakeReadiness()
	readiness.attempt, _ = strconv.ParseUint(os.Getenv(attemptEnv), 10, 64)
	os.Unsetenv(attemptEnv)
}

// sdReady sends the service manager's READY=1 once per process.
var sdReady sync.Once

// notifyReady tells whoever waits for this runner of dir that it is ready:
// the caller that started it through Start (and start.json, whose attempt
// is over from then on), and a service manager.
func notifyReady(dir string) {
	if signalReady(dir) {
		if err := markReady(dir); err != nil {
			logger().Info("runnerstate: could not record in the start attempt that this runner is ready", "dir", dir, "path", filepath.Join(dir, startName), "err", err)
		}
	}
	sdReady.Do(func() {
		sock := spawn.NotifySocket()
		if sock == "" {
			return
		}
		if err := spawn.Notify(sock, spawn.NotifyReadyMessage(os.Getpid())); err != nil {
			logger().Warn("runnerstate: could not tell the service manager this runner is ready", "socket", sock, "err", err)
		}
	})
}

// signalReady tells the caller that started this process, through its
// readiness descriptor, that this process is ready, when dir is the
// directory it was started for. Only the first call for that directory
// writes it, and returns true: the caller then marks the attempt ready
// (markReady).
func signalReady(dir string) (first bool) {
	readiness.Lock()
	defer readiness.Unlock()
	if readiness.told || readiness.forDir == "" || !sameDirPath(dir, readiness.forDir) {
		return false
	}
	readiness.told = true
	if f := readiness.f; f != nil {
		readiness.f = nil
		// An error is the caller gone, or done already (it saw the
		// record first): it looks at the directory in any case.
		spawn.SignalReady(f)
	}
	return true
}

// markReady records in dir's start.json that its child, this process, has
// been ready: the attempt is over, and once this process lets go of the
// directory, a caller starts another instead of waiting for it to be ready
// again. It takes start.lock (the caller that started it holds it until it
// has recorded the attempt); an attempt of another process, or none, is
// left as it is. A start.json that is there but cannot be read is an
// error, not "no attempt", for the mark not written leaves the attempt
// pending.
func markReady(dir string) error {
	release, err := lockStart(dir)
	if err != nil {
		return err
	}
	defer release()
	a, state, err := readState(filepath.Join(dir, startName), parseAttempt)
	if state == fileCorrupt {
		return err
	}
	if state != fileOK || a.Seq == 0 || a.Ready || a.Failed || !sameProcess(Identity(a.Child), Self()) {
		return nil
	}
	a.Ready, a.Failures = true, 0
	return writeAttempt(dir, a)
}

// sameDirPath reports whether dir is the directory at path.
func sameDirPath(dir, path string) bool {
	if abs, err := filepath.Abs(dir); err == nil && abs == path {
		return true
	}
	a, err1 := durable.KeyOf(dir)
	b, err2 := durable.KeyOf(path)
	return err1 == nil && err2 == nil && a == b
}
