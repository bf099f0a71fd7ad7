//go:build unix || windows

package runnerstate

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTryLockNamesTheHolderByTheProtocolsTable: a plain TryLock on a held
// runner directory's runner.lock, or on a held scope's scope.lock, names
// the holder, verified, as Acquire's and AcquireScope's refusals do; the
// choice is the root's table (inspectorOf), and a lock file of any other
// name is named by inspectLock.
func TestTryLockNamesTheHolderByTheProtocolsTable(t *testing.T) {
	dir := tempDir(t)
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	_, err = TryLock(filepath.Join(dir, LockName))
	var be *BusyError
	require.True(t, errors.As(err, &be), "%v", err)
	assert.Equal(t, os.Getpid(), be.PID)
	assert.True(t, be.Verified)

	scopeDir := tempDir(t)
	releaseScope, err := AcquireScope(background(t), scopeDir, dir)
	require.NoError(t, err)
	defer releaseScope()
	_, err = TryLock(filepath.Join(scopeDir, scopeLockName))
	require.True(t, errors.As(err, &be), "%v", err)
	assert.Equal(t, os.Getpid(), be.PID)
	assert.True(t, be.Verified)

	for name, want := range map[string]inspector{LockName: inspectRunnerLock, scopeLockName: inspectScopeLock, treeLockName: inspectLock, stateLockName: inspectLock, "other.lock": inspectLock} {
		assert.Equal(t, funcName(want), funcName(inspectorOf(filepath.Join(dir, name))), name)
	}
}

// funcName names a func value, so that two can be compared.
func funcName(f inspector) string {
	return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
}
