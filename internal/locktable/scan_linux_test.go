package locktable_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/filelock"
	"github.com/runnerstate/runnerstate/internal/locktable"
	"github.com/stretchr/testify/require"
)

// ScanHolders names every process with a descriptor of the locked open file
// description, such as a child that inherited it (an orphan, once this
// process lets go), and no process that merely has the file open.
func TestScanHoldersFindsInheritors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tree.lock")
	l, err := filelock.TryLock(path, filelock.Exclusive, 0o600)
	require.NoError(t, err)
	defer l.Release()
	ino, err := locktable.InodeOf(path)
	require.NoError(t, err)

	pids, complete := locktable.ScanHolders(ino)
	require.True(t, complete, "root reads every process")
	require.Equal(t, []int{os.Getpid()}, pids, "only the holder")

	inherited, err := l.Dup()
	require.NoError(t, err)
	heir := sleeper(t, inherited)
	inherited.Close()
	opened, err := os.Open(path) // open, never locked
	require.NoError(t, err)
	bystander := sleeper(t, opened)
	opened.Close()

	pids, _ = locktable.ScanHolders(ino)
	require.ElementsMatch(t, []int{os.Getpid(), heir}, pids, "the holder and its heir, not the bystander (%d)", bystander)

	l.Release()
	pids, _ = locktable.ScanHolders(ino)
	require.Equal(t, []int{heir}, pids, "the heir holds it alone once the holder lets go")
}

// sleeper starts sleep(1) with f as its descriptor 3, killed and reaped at
// cleanup, and returns its pid.
func sleeper(t *testing.T, f *os.File) int {
	t.Helper()
	cmd := exec.Command("sleep", "3600")
	cmd.ExtraFiles = []*os.File{f}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}
