package runnerstate

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

var loggerPtr atomic.Pointer[slog.Logger]

// SetLogger sets the package's logger, which every call whose options have
// no Logger of their own uses. A logger set here gets everything at the
// levels its handler enables: what the package did (Info: a runner started,
// a takeover's restart request and signals, a stale record cleared) and its
// warnings. nil restores the default, which is quiet: warnings only (Warn
// and above), to slog.Default() as it is when each is logged. Nothing below
// Warn is logged unless a logger is set here or in the call's options
// (TakeoverOptions, StartOptions, StandbyOptions). Safe for concurrent use.
//
// The warnings are kept for what an operator must act on; everything else
// is Info, or Debug. Which warnings there are, and what is said only to a
// logger the caller set, is in docs/operations.md ("What the library logs").
func SetLogger(l *slog.Logger) { loggerPtr.Store(l) }

// Logger returns the package's logger: the one SetLogger set, else the
// quiet default (warnings only, to slog.Default() as it is now). A library
// built on this package logs there when its own caller gave it no logger,
// as package daemon does, so that one SetLogger governs both.
func Logger() *slog.Logger { return logger() }

// logger is the package's logger: the one SetLogger set, else
// slog.Default() behind warningsOnly.
func logger() *slog.Logger {
	if l := loggerPtr.Load(); l != nil {
		return l
	}
	return slog.New(warningsOnly{slog.Default().Handler()})
}

// warningsOnly is the default logger's handler: the handler it wraps, given
// only records at Warn and above. A library says what it did only to a
// logger its caller gave it.
type warningsOnly struct{ slog.Handler }

func (h warningsOnly) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn && h.Handler.Enabled(ctx, level)
}

func (h warningsOnly) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h warningsOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warningsOnly{h.Handler.WithAttrs(attrs)}
}

func (h warningsOnly) WithGroup(name string) slog.Handler {
	return warningsOnly{h.Handler.WithGroup(name)}
}

// warnOnce logs a warning once per key for the life of the process, so that a
// corrupt file that every probe reads is reported once, not on every probe.
// The memory is bounded: past maxWarned keys it starts afresh.
func warnOnce(key, msg string, args ...any) {
	if firstTime(key) {
		logger().Warn(msg, args...)
	}
}

// infoOnce is warnOnce at Info: a problem a client meets in passing, and
// cannot act on, is said once, and only to a logger the caller set.
func infoOnce(key, msg string, args ...any) {
	if firstTime(key) {
		logger().Info(msg, args...)
	}
}

// infoOnceTo is infoOnce to the caller's logger (an options' Logger), not
// the package's: a standby or a takeover says once what it waits for.
func infoOnceTo(log *slog.Logger, key, msg string, args ...any) {
	if firstTime(key) {
		log.Info(msg, args...)
	}
}

// firstTime reports whether key has not been seen before, and records it;
// at most maxWarned keys are kept (then the set starts again, and a problem
// is said once more).
func firstTime(key string) bool {
	warned.Lock()
	defer warned.Unlock()
	if _, ok := warned.keys[key]; ok {
		return false
	}
	if len(warned.keys) >= maxWarned {
		clear(warned.keys)
	}
	warned.keys[key] = struct{}{}
	return true
}

const maxWarned = 1024

var warned = struct {
	sync.Mutex
	keys map[string]struct{}
}{keys: make(map[string]struct{})}
