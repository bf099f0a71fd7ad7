package durable

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"sync"
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
	return ReadStateOwned(path, limit, parse, nil)
}

// ReadStateOwned is ReadState whose file is first shown to evidence (nil:
// any file is), with its FileID from the fstat of the very descriptor it is
// read through (never a second lookup of path): a file evidence refuses is
// Absent, its content neither parsed nor returned.
func ReadStateOwned[T any](path string, limit int, parse func([]byte) (T, error), evidence func(FileID) bool) (T, State, error) {
	var zero T
	data, id, err := ReadFileID(path, limit)
	if (err == nil || errors.Is(err, ErrTooLarge)) && evidence != nil && !evidence(id) {
		return zero, Absent, nil
	}
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

// DecodeObject decodes data, the content of a small JSON state file, into
// v. Anything but one JSON object (white space around it allowed) is an
// error: an empty file, an array, a bare number.
func DecodeObject(data []byte, v any) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return errors.New("empty file")
	}
	if data[0] != '{' {
		return errors.New("not a JSON object")
	}
	return json.Unmarshal(data, v)
}

// Last remembers the last decoding of one kind of small file, keyed by the
// file's exact bytes, so that a reader that sees the same bytes again and
// again (a probe while a runner runs) decodes them once. It can never be
// out of date: other bytes are decoded afresh. What it hands out is a copy, which
// the caller may change. It is safe for concurrent use.
type Last[T any] struct {
	decode func([]byte) (T, error)
	clone  func(T) T

	mu   sync.Mutex
	data []byte
	v    T
	err  error
}

// NewLast returns a Last that decodes with decode and hands out clone's copy
// of what it decoded.
func NewLast[T any](decode func([]byte) (T, error), clone func(T) T) *Last[T] {
	return &Last[T]{decode: decode, clone: clone}
}

// Parse is decode(data), remembered: the bytes of the last call decoded
// again give the last answer, as a copy, without decoding.
func (m *Last[T]) Parse(data []byte) (T, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil || !bytes.Equal(m.data, data) {
		m.v, m.err = m.decode(data)
		m.data = append(m.data[:0], data...)
	}
	return m.clone(m.v), m.err
}
