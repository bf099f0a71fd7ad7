package spawn

import (
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNotifyErrors(t *testing.T) {
	assert.ErrorIs(t, Notify("", "READY=1"), ErrNoNotifySocket)
	err := Notify(filepath.Join(testharness.TempDir(t), "nobody.sock"), "READY=1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nobody.sock")
}
