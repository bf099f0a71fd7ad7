package hold

import (
	"path/filepath"
	"slices"
	"sync"

	"github.com/runnerstate/runnerstate/internal/durable"
)

// Index is the holds a process has, found by directory: by the directory's
// identity (durable.Key: device and inode on Unix), so that two spellings of
// one directory find one hold, and by its absolute path, so that a hold
// whose directory was removed or renamed under it is still found by the name
// it was taken under. Both are map lookups. The zero Index can be used as is;
// it is safe for concurrent use.
type Index struct {
	mu     sync.Mutex
	byKey  map[durable.Key]*Hold
	byPath map[string][]*Hold // oldest first: a directory removed and made again can have two
}

// Add puts h in x, where it stays until h.Release. A hold added later for
// the same directory identity is the one Of finds by it.
func (x *Index) Add(h *Hold) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byKey == nil {
		x.byKey, x.byPath = map[durable.Key]*Hold{}, map[string][]*Hold{}
	}
	h.index = x
	x.byKey[h.key] = h
	x.byPath[h.abs] = append(x.byPath[h.abs], h)
}

// Of returns the hold of dir, or nil: the one for dir's identity, or, when
// there is none (dir is gone, or is another directory now), the newest one
// taken under dir's absolute path.
func (x *Index) Of(dir string) *Hold {
	key, kerr := durable.KeyOf(dir)
	abs, _ := filepath.Abs(dir)
	x.mu.Lock()
	defer x.mu.Unlock()
	if kerr == nil {
		if h := x.byKey[key]; h != nil {
			return h
		}
	}
	if hs := x.byPath[abs]; len(hs) > 0 {
		return hs[len(hs)-1]
	}
	return nil
}

// remove takes h out of x.
func (x *Index) remove(h *Hold) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byKey[h.key] == h {
		delete(x.byKey, h.key)
	}
	hs := slices.DeleteFunc(x.byPath[h.abs], func(o *Hold) bool { return o == h })
	if len(hs) == 0 {
		delete(x.byPath, h.abs)
	} else {
		x.byPath[h.abs] = hs
	}
}
