package spawn

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// RotateLog moves names along (path → path.1 → path.2 …, the last one
// dropped) only when path is a regular file over the limit; a symlink is
// never followed: at path it is left alone, at a rotated name it is
// replaced as a name.
func TestRotateLog(t *testing.T) {
	dir := testharness.TempDir(t)
	path := filepath.Join(dir, "runner.log")
	write := func(name, s string) { require.NoError(t, os.WriteFile(name, []byte(s), 0o600)) }
	read := func(name string) string {
		data, err := os.ReadFile(name)
		require.NoError(t, err)
		return string(data)
	}
	write(path, "12345")
	require.NoError(t, RotateLog(path, 5, 2))
	assert.Equal(t, "12345", read(path), "not over the limit")
	require.NoError(t, RotateLog(path, 0, 2))
	require.NoError(t, RotateLog(path, -1, 2))
	assert.Equal(t, "12345", read(path), "limit <= 0: never")

	write(path+".1", "one")
	write(path+".2", "two")
	require.NoError(t, RotateLog(path, 4, 2))
	_, err := os.Lstat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "moved to path.1")
	assert.Equal(t, "12345", read(path+".1"))
	assert.Equal(t, "one", read(path+".2"), "two dropped")
	_, err = os.Lstat(path + ".3")
	assert.ErrorIs(t, err, os.ErrNotExist)

	if runtime.GOOS == "windows" {
		return // symlinks need a privilege there
	}
	outside := filepath.Join(testharness.TempDir(t), "outside")
	write(outside, "0123456789")
	require.NoError(t, os.Symlink(outside, path))
	require.NoError(t, RotateLog(path, 4, 2))
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	assert.Equal(t, os.ModeSymlink, fi.Mode().Type(), "a symlink at path is left for OpenLog to refuse")
	assert.Equal(t, "12345", read(path+".1"))

	require.NoError(t, os.Remove(path))
	write(path, "abcdefgh")
	require.NoError(t, os.Remove(path+".2"))
	require.NoError(t, os.Symlink(outside, path+".2"))
	require.NoError(t, RotateLog(path, 4, 2))
	fi, err = os.Lstat(path + ".2")
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the symlink at path.2 is replaced")
	assert.Equal(t, "12345", read(path+".2"))
	assert.Equal(t, "abcdefgh", read(path+".1"))
	assert.Equal(t, "0123456789", read(outside), "its target untouched")
}
