package examples_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the stories leave no goroutine behind: each one waits
// for the programs it started in a goroutine of its own, and reaps them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
