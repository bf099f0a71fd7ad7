// Package memo remembers the last decoding of one kind of small file, keyed
// by the file's exact bytes, so that a reader that sees the same bytes again
// and again (a probe while a runner runs) decodes them once.
//
// A memo can never be stale: other bytes are decoded afresh. What it hands
// out is a copy, which the caller may change.
package memo

import (
	"bytes"
	"sync"
)

// Last remembers the last decoding of one kind of small file. It is safe
// for concurrent use.
type Last[T any] struct {
	decode func([]byte) (T, error)
	clone  func(T) T

	mu   sync.Mutex
	data []byte
	v    T
	err  error
}

// New returns a Last that decodes with decode and hands out clone's copy of
// what it decoded.
func New[T any](decode func([]byte) (T, error), clone func(T) T) *Last[T] {
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
