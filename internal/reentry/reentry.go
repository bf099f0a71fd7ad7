// Package reentry tells a goroutine that it already holds a key, so that a
// non-reentrant lock taken again by its own holder fails at once instead of
// waiting for itself.
//
// Go gives goroutines no identity on purpose; this package reads the id the
// runtime prints at the head of a goroutine's stack trace, and uses it for
// nothing but this check. It costs one runtime.Stack call of a few dozen
// bytes per Held or Enter.
package reentry

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
)

// Guard records, for each key held, the goroutine that holds it. The zero
// Guard is ready to use; it is safe for concurrent use.
type Guard struct {
	mu      sync.Mutex
	holders map[string]uint64
}

// Held reports whether the calling goroutine holds key (entered and not yet
// left). Another goroutine's hold of key is not reported.
func (g *Guard) Held(key string) bool {
	id := goroutineID()
	g.mu.Lock()
	defer g.mu.Unlock()
	holder, ok := g.holders[key]
	return ok && holder == id
}

// Enter records that the calling goroutine holds key, and returns the func
// that records it no longer does. The caller must already exclude every
// other holder of key (it holds the lock key names): Enter does not wait.
func (g *Guard) Enter(key string) (leave func()) {
	id := goroutineID()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holders == nil {
		g.holders = make(map[string]uint64)
	}
	g.holders[key] = id
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.holders[key] == id {
			delete(g.holders, key)
		}
	}
}

// goroutineID returns the calling goroutine's id, from the first line of its
// stack trace ("goroutine 7 [running]:"); 0 if that cannot be read.
func goroutineID() uint64 {
	var buf [64]byte
	b := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
