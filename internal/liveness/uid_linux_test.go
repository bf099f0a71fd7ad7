package liveness

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// UID reads a verified process's effective uid from the kernel: this
// process's own, a child's running as another user, and none for a process
// that has exited.
func TestUID(t *testing.T) {
	uid, err := UID(Current())
	require.NoError(t, err)
	assert.Equal(t, os.Geteuid(), uid)

	cmd := exec.Command("sleep", "30")
	want := os.Geteuid()
	if want == 0 {
		want = 4343
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(want), Gid: uint32(want)}}
	}
	require.NoError(t, cmd.Start())
	id, err := Lookup(cmd.Process.Pid)
	require.NoError(t, err)
	uid, err = UID(id)
	require.NoError(t, err)
	assert.Equal(t, want, uid)

	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	_, err = UID(id)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrNotAlive), "%v", err)
}
