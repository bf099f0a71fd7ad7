package etcd

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Multi-process tests re-execute the test binary with roleEnv set; TestMain
// runs that role instead of the tests.
const roleEnv = "RUNNERSTATE_ETCD_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	goleak.VerifyTestMain(m)
}
