package startup

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnerstate/runnerstate/internal/spawn"
)

// locals are the attempts this process started and whose process still
// lives, by directory and sequence, so that its other callers learn the
// exit status too.
var locals = struct {
	sync.Mutex
	m map[localKey]*local
}{m: map[localKey]*local{}}

type localKey struct {
	dir string
	seq uint64
}

// local is a process this process started.
type local struct {
	child *spawn.Child
	ready atomic.Bool // seen ready (its descriptor, or its record)
}

func localChild(abs string, seq uint64) *local {
	locals.Lock()
	defer locals.Unlock()
	return locals.m[localKey{abs, seq}]
}

// Reaped reports whether every process this process started for the
// directory abs has exited and been reaped.
func Reaped(abs string) bool {
	locals.Lock()
	defer locals.Unlock()
	for k := range locals.m {
		if k.dir == abs {
			return false
		}
	}
	return true
}

// look is what a caller waiting on an attempt looks at: the Protocol's probe
// and the attempt record.
type look[R any] struct {
	rec         R
	held, ready bool
	err         error
	att         Attempt
	haveAtt     bool
}

// Looks is the last look at each directory taken by a waiter of this
// process, which every waiter woken before it began may use: a crowd of
// callers in one process woken by one change looks once, not once each.
// The zero value is ready; a process keeps one for all its calls.
type Looks[R any] struct {
	m sync.Map // absolute dir -> *lookShare[R]
}

// lookShare is the last look at one directory.
type lookShare[R any] struct {
	mu sync.Mutex
	at time.Time // when the look began
	l  look[R]
}

// lookAfter returns a look at the directory that began after woke: a
// concurrent waiter's, or its own.
func (c *Call[R]) lookAfter(woke time.Time) look[R] {
	v, _ := c.Looks.m.LoadOrStore(c.Abs, &lookShare[R]{})
	sh := v.(*lookShare[R])
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.at.After(woke) {
		at := time.Now()
		var l look[R]
		l.rec, l.held, l.ready, l.err = c.Protocol.Probe()
		l.att, l.haveAtt, _ = c.Protocol.Read()
		sh.at, sh.l = at, l
	}
	l := sh.l
	l.rec = c.Protocol.Clone(l.rec)
	return l
}
