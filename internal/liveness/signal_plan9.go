package liveness

import "strconv"

// Signal is a signal [Process.Signal] would send. Plan 9 has notes, not
// signals, and this package proves nothing there, so nothing is ever sent;
// the type exists so that callers build.
type Signal int

// The signals a takeover sends, numbered as on Unix.
const (
	SIGTERM Signal = 15
	SIGKILL Signal = 9
)

// String names the signal as Unix does.
func (s Signal) String() string {
	switch s {
	case SIGTERM:
		return "terminated"
	case SIGKILL:
		return "killed"
	}
	return "signal " + strconv.Itoa(int(s))
}
