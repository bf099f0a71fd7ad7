package reentry

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGoroutineID(t *testing.T) {
	here := goroutineID()
	require.NotZero(t, here)
	other := make(chan uint64)
	go func() { other <- goroutineID() }()
	assert.NotEqual(t, here, <-other)
	assert.Equal(t, here, goroutineID(), "stable within a goroutine")
}

// TestGuard: a key is held by the goroutine that entered it, and by no other
// goroutine; leaving ends the hold, and keys are independent.
func TestGuard(t *testing.T) {
	var g Guard
	assert.False(t, g.Held("a"))
	leave := g.Enter("a")
	assert.True(t, g.Held("a"))
	assert.False(t, g.Held("b"))
	seen := make(chan bool)
	go func() { seen <- g.Held("a") }()
	assert.False(t, <-seen, "another goroutine does not hold it")
	leave()
	assert.False(t, g.Held("a"))

	// A stale leave does not end a later hold by another goroutine.
	stale := g.Enter("a")
	stale()
	entered, left := make(chan struct{}), make(chan struct{})
	go func() {
		l := g.Enter("a")
		defer l()
		close(entered)
		<-left
		seen <- g.Held("a")
	}()
	<-entered
	stale()
	close(left)
	assert.True(t, <-seen, "the holder still holds it")
}
