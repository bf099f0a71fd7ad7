package runnerstate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/runnerstate/runnerstate/internal/dirwatch"
	"github.com/runnerstate/runnerstate/internal/durable"
)

// Restart modes: what a restart request asks of the runner.
const (
	// RestartDrain asks the runner to take no new job and exit when the jobs
	// it is running have finished.
	RestartDrain = "drain"
	// RestartNow asks the runner to exit at once.
	RestartNow = "now"
)

// ErrBadMode reports a restart mode other than RestartDrain and RestartNow.
var ErrBadMode = errors.New("runnerstate: restart mode must be \"drain\" or \"now\"")

// restartRequest is the content of restart.json.
type restartRequest struct {
	Mode        string    `json:"mode"`
	RequestedAt time.Time `json:"requested_at,omitzero"`
	By          Identity  `json:"by,omitzero"`
	// For is the instance of the runner that held the lock when the request
	// was made, or "" when none did. A fresh holder retires requests made for
	// another instance.
	For string `json:"for"`
	// Takeover marks a request left by a starter in Takeover: it is meant for
	// the runner being taken over, never for the starter admitted after it,
	// so an admission retires it whatever its addressee and time.
	Takeover bool `json:"takeover,omitempty"`
}

// strength orders modes: a request never weakens a pending one.
func strength(mode string) int {
	switch mode {
	case RestartNow:
		return 2
	case RestartDrain:
		return 1
	}
	return 0
}

// RequestRestart leaves a restart request for dir's runner in restart.json,
// addressed to the runner that holds the lock now. When none does, the
// request is kept only for a runner being admitted at that moment; a runner
// that starts afterwards retires it as meant for its predecessor. It never weakens a pending request: "now" stays "now", and "now"
// upgrades a pending "drain". The runner sees it through RestartRequested or
// WatchRestart; this call does not wait for the runner to act.
//
// Errors: ErrBadMode for any mode but RestartDrain and RestartNow; an error
// naming dir when it does not exist; a symlink or directory at restart.json is
// refused naming the path. Touches restart.json (atomically) under the
// directory's state lock.
func RequestRestart(dir, mode string) error {
	_, err := requestRestart(dir, mode, Self())
	return err
}

// requestRestart writes or upgrades the request and returns the request now
// pending. by is who asks.
func requestRestart(dir, mode string, by Identity) (restartRequest, error) {
	if strength(mode) == 0 {
		return restartRequest{}, fmt.Errorf("%w, not %q", ErrBadMode, mode)
	}
	if err := checkDir("RequestRestart", dir); err != nil {
		return restartRequest{}, err
	}
	if fi, err := os.Stat(dir); err != nil {
		return restartRequest{}, pathError("restart", dir, durable.Unwrap(err))
	} else if !fi.IsDir() {
		return restartRequest{}, pathError("restart", dir, durable.ErrNotDir)
	}
	var pending restartRequest
	err := withStateLock(dir, func() error {
		var err error
		pending, _, err = requestRestartLocked(dir, mode, by, false)
		return err
	})
	return pending, err
}

// requestRestartLocked is requestRestart for a caller that holds dir's state
// lock. wrote says whether a new request was written (rather than a pending
// one of equal or greater strength kept).
func requestRestartLocked(dir, mode string, by Identity, takeover bool) (pending restartRequest, wrote bool, err error) {
	target := ""
	if st := inspectRunner(dir); st.held && st.named {
		target = st.holder.Instance
	}
	if old, ok := readRestart(dir); ok && old.For == target && strength(old.Mode) >= strength(mode) {
		return old, false, nil
	}
	pending = restartRequest{Mode: mode, RequestedAt: time.Now(), By: by, For: target, Takeover: takeover}
	data, err := jsonLine(pending)
	if err != nil {
		return restartRequest{}, false, err
	}
	if err := durable.Write(dir, RestartName, data); err != nil {
		return restartRequest{}, false, public(err)
	}
	return pending, true, nil
}

// readRestart reads restart.json. Anything unreadable or unparsable, or with
// an unknown mode, is no request (logged once).
func readRestart(dir string) (restartRequest, bool) {
	path := filepath.Join(dir, RestartName)
	req, state, err := readState(path, parseRestart)
	if state == fileCorrupt {
		warnOnce("restart:"+err.Error(), "runnerstate: ignoring a restart request that cannot be read", "path", path, "err", err)
	}
	return req, state == fileOK
}

// parseRestart parses restart.json content.
func parseRestart(data []byte) (restartRequest, error) {
	var req restartRequest
	if err := durable.DecodeObject(data, &req); err != nil {
		return restartRequest{}, err
	}
	if strength(req.Mode) == 0 {
		return restartRequest{}, fmt.Errorf("unknown mode %q", req.Mode)
	}
	return req, nil
}

// RestartRequested reports the pending restart mode for dir, if any. A file
// that cannot be read or parsed counts as no request: a runner never exits on
// a request it cannot understand (the problem is logged once). It takes no
// lock and creates nothing.
func RestartRequested(dir string) (mode string, ok bool) {
	if dir == "" {
		return "", false
	}
	req, ok := readRestart(dir)
	if !ok {
		return "", false
	}
	return req.Mode, true
}

// ClearRestart removes dir's restart request. It is idempotent: no request,
// or no dir, is not an error. Errors: a directory at restart.json, or the
// system's error, naming the path.
func ClearRestart(dir string) error {
	if err := checkDir("ClearRestart", dir); err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return withStateLock(dir, func() error { return public(durable.Remove(dir, RestartName)) })
}

// Retiring a request: three policies, one for each moment a request can stop
// being meant for anyone. Each runs under the state lock.

// retireOnAdmission removes, for self, a runner admitted by a call that began
// at since, a restart request that is not for it: one a takeover left for the
// runner it replaced, one made for another instance, or one made before
// since. An unparsable request is set aside.
func retireOnAdmission(dir string, self Identity, since time.Time) {
	path := filepath.Join(dir, RestartName)
	req, state, err := readState(path, parseRestart)
	switch {
	case state == fileAbsent:
		return
	case state == fileCorrupt:
		if !errors.Is(err, durable.ErrIsDir) {
			setAside(dir, RestartName, "file", err)
		}
		return
	}
	if req.Takeover || (req.For != "" && req.For != self.Instance) || req.RequestedAt.Before(since) {
		if err := durable.Remove(dir, RestartName); err == nil {
			logger().Info("runnerstate: retired a restart request meant for the previous runner", "path", path, "mode", req.Mode, "requested_at", req.RequestedAt)
		}
	}
}

// retireOnRelease removes, for a runner letting go, a restart request
// addressed to it (instance).
func retireOnRelease(dir, instance string) {
	if req, ok := readRestart(dir); ok && req.For == instance && instance != "" {
		durable.Remove(dir, RestartName)
	}
}

// retireOnClear removes, for ClearStale, a restart request addressed to any
// runner: holding the runner lock, that runner is gone. It reports whether
// one was removed.
func retireOnClear(dir string) bool {
	if req, ok := readRestart(dir); ok && req.For != "" {
		return durable.Remove(dir, RestartName) == nil
	}
	return false
}

// WatchRestart delivers dir's restart requests: one already pending when it
// starts, then each new request, or a stronger one than was last delivered
// ("now" after "drain"). The channel is closed when ctx ends. A request that
// cannot be parsed is never delivered.
//
// It wakes promptly on a change: on Linux through inotify on dir, elsewhere by
// polling restart.json every 20 ms. Delivery waits for the receiver; the
// request read after a delivery is the one on disk then, so requests that came
// and went while the receiver was busy are not replayed.
func WatchRestart(ctx context.Context, dir string) <-chan string {
	ch := make(chan string)
	if dir == "" {
		warnOnce("watch-empty", "runnerstate: WatchRestart was given an empty directory name; it delivers nothing")
		go func() {
			<-ctx.Done()
			close(ch)
		}()
		return ch
	}
	go func() {
		defer close(ch)
		w := dirwatch.New(dir)
		defer w.Close()
		var last restartRequest
		delivered := false
		for {
			req, ok := readRestart(dir)
			if !ok {
				delivered = false // cleared: the next request is new
			} else if !delivered || !sameRequest(req, last) {
				select {
				case ch <- req.Mode:
					last, delivered = req, true
				case <-ctx.Done():
					return
				}
				continue
			}
			if err := w.Wait(ctx, 0, nil); err != nil {
				return
			}
		}
	}()
	return ch
}

// sameRequest reports whether a and b are one request: the same mode, for
// the same runner, made at the same instant. The watcher compares so to
// deliver each request once, however often its file is rewritten (a request
// kept as it is by a weaker one, a rewrite of the same bytes).
func sameRequest(a, b restartRequest) bool {
	return a.Mode == b.Mode && a.For == b.For && a.RequestedAt.Equal(b.RequestedAt)
}
