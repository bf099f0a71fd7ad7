package filelock

import (
	"testing"

	"go.uber.org/goleak"
)

// leakOptions are the goroutines goleak may find that are not ours.
var leakOptions []goleak.Option

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions...)
}
