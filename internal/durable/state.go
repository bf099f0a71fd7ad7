package durable

import (
	"errors"
	"io/fs"
)

// State is what reading a small state file found.
type State int

const (
	Absent  State = iota
	OK            // read whole and parsed
	Corrupt       // unreadable, unparsable, a symlink, a directory, too large
)

// ReadState reads the small state file at path, up to limit bytes, with
// parse. A file that cannot be read or parsed is Corrupt, with an
// *fs.PathError naming path as the reason (Op "read" and ErrTooLarge for a
// file over limit, Op "parse" and parse's error for one that does not
// parse); it is never modified here. A missing file is Absent, with no
// error.
func ReadState[T any](path string, limit int, parse func([]byte) (T, error)) (T, State, error) {
	var zero T
	data, err := ReadFile(path, limit)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return zero, Absent, nil
		}
		if errors.Is(err, ErrTooLarge) {
			err = &fs.PathError{Op: "read", Path: path, Err: ErrTooLarge}
		}
		return zero, Corrupt, err
	}
	v, err := parse(data)
	if err != nil {
		return zero, Corrupt, &fs.PathError{Op: "parse", Path: path, Err: unparsableError{err}}
	}
	return v, OK, nil
}

// unparsableError is ReadState's error for a file that was read whole but
// is not what it should be, as against one that could not be read at all.
type unparsableError struct{ err error }

func (e unparsableError) Error() string { return e.err.Error() }
func (e unparsableError) Unwrap() error { return e.err }

// Unreadable reports whether err, ReadState's for a Corrupt file, says it
// could not be read at all (an I/O error, no descriptor left): then what it
// holds is unknown, rather than known to be wrong.
func Unreadable(err error) bool {
	var ue unparsableError
	return !errors.As(err, &ue) && !errors.Is(err, ErrTooLarge)
}
