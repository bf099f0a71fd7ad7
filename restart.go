package runnerstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
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
		return restartRequest{}, pathError("restart", dir, unwrapPathErr(err))
	} else if !fi.IsDir() {
		return restartRequest{}, pathError("restart", dir, errors.New("is not a directory"))
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
	if st := inspectRunner(dir); st.held && st.contentOK {
		target = st.content.Instance
	}
	if old, ok := readRestart(dir); ok && old.For == target && strength(old.Mode) >= strength(mode) {
		return old, false, nil
	}
	pending = restartRequest{Mode: mode, RequestedAt: time.Now(), By: by, For: target, Takeover: takeover}
	data, err := json.Marshal(pending)
	if err != nil {
		return restartRequest{}, false, err
	}
	if err := writeAtomic(dir, RestartName, append(data, '\n')); err != nil {
		return restartRequest{}, false, err
	}
	return pending, true, nil
}

// readRestart reads restart.json. Anything unreadable or unparsable, or with
// an unknown mode, is no request.
func readRestart(dir string) (restartRequest, bool) {
	path := filepath.Join(dir, RestartName)
	data, err := readHint(path, maxRecordSize)
	if err != nil {
		if !isNotExist(err) {
			warnOnce("restart:"+path+err.Error(), "runnerstate: ignoring an unreadable restart request", "path", path, "err", err)
		}
		return restartRequest{}, false
	}
	req, err := parseRestart(data)
	if err != nil {
		warnOnce("restart:"+path+string(data), "runnerstate: ignoring an unparsable restart request", "path", path, "err", err)
		return restartRequest{}, false
	}
	return req, true
}

// parseRestart parses restart.json content.
func parseRestart(data []byte) (restartRequest, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return restartRequest{}, errors.New("not a JSON object")
	}
	var req restartRequest
	if err := json.Unmarshal(data, &req); err != nil {
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
	return withStateLock(dir, func() error { return removeState(dir, RestartName) })
}

// removeState removes dir/name if it is there, and syncs dir.
func removeState(dir, name string) error {
	path := filepath.Join(dir, name)
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return pathError("remove", path, unwrapPathErr(err))
	}
	return syncDir(dir)
}

// retireRestart removes a restart request that is not for self: one made for
// another instance, or before since. Called by a fresh holder under the state
// lock. An unparsable request is set aside.
func retireRestart(dir string, self Identity, since time.Time) {
	path := filepath.Join(dir, RestartName)
	data, err := readHint(path, maxRecordSize)
	if err != nil {
		if !isNotExist(err) && !errors.Is(err, errIsDir) {
			setAside(dir, RestartName, "file", err)
		}
		return
	}
	req, err := parseRestart(data)
	if err != nil {
		setAside(dir, RestartName, "file", err)
		return
	}
	if req.Takeover || (req.For != "" && req.For != self.Instance) || req.RequestedAt.Before(since) {
		if err := removeState(dir, RestartName); err == nil {
			logger().Info("runnerstate: retired a restart request meant for the previous runner", "path", path, "mode", req.Mode, "requested_at", req.RequestedAt)
		}
	}
}

// retireRestartFor removes a restart request addressed to instance.
func retireRestartFor(dir, instance string) {
	if req, ok := readRestart(dir); ok && req.For == instance && instance != "" {
		removeState(dir, RestartName)
	}
}

// retireRestartAddressed removes a restart request addressed to a specific
// runner (which is gone when this is called under the runner lock).
func retireRestartAddressed(dir string) bool {
	if req, ok := readRestart(dir); ok && req.For != "" {
		return removeState(dir, RestartName) == nil
	}
	return false
}

// setAside renames an unreadable state file to <name>.corrupt, replacing an
// older one, and logs it; what names the file in the log ("file", "runner
// record"). It reports whether the file was moved. Called only under the
// runner lock.
func setAside(dir, name, what string, why error) bool {
	path := filepath.Join(dir, name)
	aside := path + corruptSuffix
	if err := os.Rename(path, aside); err != nil {
		warnOnce("aside:"+path, "runnerstate: could not set aside an unreadable "+what, "path", path, "err", why, "rename_err", err)
		return false
	}
	syncDir(dir)
	logger().Warn("runnerstate: set aside an unreadable "+what, "path", path, "aside", aside, "err", why)
	return true
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
		w := newDirWatcher(dir)
		defer w.close()
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
			if err := w.wait(ctx, 0, nil); err != nil {
				return
			}
		}
	}()
	return ch
}

func sameRequest(a, b restartRequest) bool {
	return a.Mode == b.Mode && a.For == b.For && a.RequestedAt.Equal(b.RequestedAt)
}
