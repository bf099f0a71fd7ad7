//go:build unix || windows

package runnerstate

import (
	"errors"
	"fmt"
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

// TestOccupancyAnswersAsTheFlagsDid: for every combination of lockState's
// flags that the inspection can produce (verified, hidden and lostFile imply
// held; lostFile implies verified; treeHeld implies runner.lock free), the
// occupancy answers each question its callers asked of the flags as the
// flags did.
func TestOccupancyAnswersAsTheFlagsDid(t *testing.T) {
	seen := map[occupancy]bool{}
	for bits := range 1 << 5 {
		st := lockState{held: bits&1 != 0, verified: bits&2 != 0, hidden: bits&4 != 0, lostFile: bits&8 != 0, treeHeld: bits&16 != 0}
		if (st.verified || st.hidden || st.lostFile) && !st.held || st.lostFile && !st.verified || st.treeHeld && st.held {
			continue // never produced
		}
		occ := st.occupancy()
		seen[occ] = true
		name := fmt.Sprintf("%+v: %v", st, occ)
		assert.Equal(t, st.held, occ.held(), name)
		assert.Equal(t, st.verified, occ.verified(), name)
		assert.Equal(t, !st.held && !st.treeHeld, occ == occFree, name)
		assert.Equal(t, !st.held && st.treeHeld || st.lostFile, occ == occOrphans || occ == occLostFile, name)
		assert.Equal(t, st.lostFile, occ == occLostFile, name)
		if st.held && !st.lostFile {
			assert.Equal(t, st.verified || st.hidden, occ != occUnverified, name)
		}
		if st.held {
			assert.Equal(t, !st.verified && !st.hidden, occ == occUnverified, name)
		}
	}
	assert.Len(t, seen, 6, "every occupancy is produced")
	for occ := range seen {
		assert.NotContains(t, occ.String(), "occupancy(", occ)
	}
}
