package spawn

import (
	"bytes"
	"errors"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCleanEnvDropsWhatARunnerMustNotInherit(t *testing.T) {
	got := cleanEnv([]string{"A=1", "NOTIFY_SOCKET=/run/x", ReadyFDEnv + "=3", ReadyForEnv + "=/d", "RUNNERSTATE_OTHER=keep"})
	assert.Equal(t, []string{"A=1", "RUNNERSTATE_OTHER=keep"}, got)
}

func TestStartRefusesAStreamThatIsNotAFile(t *testing.T) {
	cmd := exec.Command("true")
	cmd.Stdout = &bytes.Buffer{}
	_, err := Start(cmd, nil, nil, "", nil)
	assert.True(t, errors.Is(err, ErrStream), "%v", err)
	assert.Nil(t, cmd.Process)
}
