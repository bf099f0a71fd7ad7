// Package advice says what to do about a system error met on a path: a
// hint added to an error whose cure is known (a full disk, no descriptor
// left, a read-only filesystem...), and, for a permission error, the
// directory it is really about, with its mode and owner. The errors it
// returns unwrap to the error they were given, so errors.Is still finds the
// system's error. The system's side is in advice_unix.go; elsewhere no
// advice is given.
package advice

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/runnerstate/runnerstate/internal/durable"
)

// advise returns err with what to do about it, when it holds a system error
// whose cure is known (a full disk, no descriptor left, a read-only
// filesystem...): an error whose message adds the advice, and which unwraps
// to err, so errors.Is still finds the system's error. Anything else, nil,
// and an error already advised come back as they are.
func Advise(err error) error {
	var ae *advisedError
	if err == nil || errors.As(err, &ae) {
		return err
	}
	a := For(err)
	if a == "" {
		return err
	}
	return &advisedError{err: err, advice: a}
}

type advisedError struct {
	err    error
	advice string
}

func (e *advisedError) Error() string { return e.err.Error() + "; " + e.advice }
func (e *advisedError) Unwrap() error { return e.err }

// denied is the error for path, whose use failed with a permission error
// (err, which errors.Is still finds): when a directory on the way to path
// may not be entered by this process, the error names that directory, with
// its mode and owner, as the cause, rather than path; when path does not
// exist and this process may not create files in its directory, the error
// says so, with the directory's mode and owner; otherwise (and for any error
// but a permission error) nil, and the caller keeps its own error.
func Denied(path string, err error) error {
	if !errors.Is(err, fs.ErrPermission) {
		return nil
	}
	err = durable.Unwrap(err)
	dir := blockedDir(path)
	if dir == "" {
		if dir = unwritableDir(path); dir != "" {
			return &fs.PathError{Op: "runnerstate: create", Path: path, Err: &advisedError{
				err:    fmt.Errorf("%w (this process may not create files in %s%s)", err, dir, dirDescription(dir)),
				advice: "run as a user allowed to write there, or fix its permissions",
			}}
		}
		return nil
	}
	return &fs.PathError{Op: "runnerstate: enter", Path: dir, Err: &advisedError{
		err:    fmt.Errorf("%w (this process may not enter it%s, so it cannot reach %s)", err, dirDescription(dir), filepath.Base(path)),
		advice: "run as a user allowed to enter it, or fix its permissions",
	}}
}
