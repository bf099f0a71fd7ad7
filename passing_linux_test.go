//go:build linux

package runnerstate

import (
	"testing"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A busy answer whose lock nobody holds any more (the file was closed, but
// a reader of the holder's /proc/<pid>/fdinfo, a probe, still has it, so
// the kernel has not let the lock go) is tried again until the lock is
// free: Acquire succeeds. Here a mapping stands in for the reader: it keeps
// the closed file, and its lock, until it is unmapped. A lock that stays on
// its way for ever is busy after a bounded wait.
func TestAcquireWaitsOutALockOnItsWayToFree(t *testing.T) {
	if !kernelNamesHolders {
		t.Skip("the kernel does not list lock holders here: a busy answer is tried again only briefly")
	}
	dir := tempDir(t)
	pin := startChild(t, "mmap-pin", dir)
	pin.Expect("pinned")

	_, err := Acquire(dir)
	require.ErrorIs(t, err, ErrBusy, "still pinned after passingWait: busy")

	// The hook runs before the retries: the pin goes while it runs.
	seen := make(chan filelock.BusyAnswer, 1)
	unpinned := make(chan struct{})
	fn := func(state filelock.BusyAnswer) { seen <- state; <-unpinned }
	defer filelock.SetPassingHook(fn)()
	type result struct {
		release func()
		err     error
	}
	done := make(chan result, 1)
	go func() {
		release, err := Acquire(dir)
		done <- result{release, err}
	}()
	require.Equal(t, filelock.BusyPassing, <-seen, "nobody holds it through a descriptor: passing")
	pin.Send("unpin")
	pin.Expect("unpinned")
	close(unpinned)
	r := <-done
	require.NoError(t, r.err, "admitted once the lock is free")
	r.release()
	require.NoError(t, pin.Stop())
}

// A lock held through a descriptor, even one a child inherited, is held:
// the answer is busy at once, not tried again.
func TestAcquireBusyAtOnceWhenHeld(t *testing.T) {
	if !kernelNamesHolders {
		t.Skip("the kernel does not list lock holders here")
	}
	dir := tempDir(t)
	holder := startChild(t, "acquire", dir)
	holder.Expect("acquired")
	seen := make(chan filelock.BusyAnswer, 8)
	fn := func(state filelock.BusyAnswer) { seen <- state }
	defer filelock.SetPassingHook(fn)()
	_, err := Acquire(dir)
	assert.ErrorIs(t, err, ErrBusy)
	assert.Equal(t, filelock.BusyHeld, <-seen)
	require.NoError(t, holder.Stop())
}
