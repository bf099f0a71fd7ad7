//go:build unix || windows

package runnerstate

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Point 6: a directory name that is not valid UTF-8 is refused by every
// call that takes one, before anything is created, with the name quoted;
// JSON would have stored it lossily in runner.json.
func TestNonUTF8NamesAreRefused(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "run\xff")
	quoted := strconv.Quote(dir)
	ctx := context.Background()
	calls := map[string]func() error{
		"Acquire":        func() error { _, err := Acquire(dir); return err },
		"Running":        func() error { _, _, err := Running(dir); return err },
		"ClearStale":     func() error { _, _, err := ClearStale(dir); return err },
		"Status":         func() error { _, err := Status(dir); return err },
		"Publish":        func() error { return Publish(dir, Record{}) },
		"SaveLines":      func() error { return SaveLines(dir, "x", nil) },
		"LoadLines":      func() error { _, err := LoadLines(dir, "x"); return err },
		"AppendLine":     func() error { return AppendLine(dir, "x", "y") },
		"MigrateFile":    func() error { return MigrateFile(dir, "x", "y") },
		"RequestRestart": func() error { return RequestRestart(dir, RestartNow) },
		"ClearRestart":   func() error { return ClearRestart(dir) },
		"Takeover":       func() error { _, err := Takeover(ctx, dir, TakeoverOptions{}); return err },
		"Standby":        func() error { _, err := Standby(ctx, dir, StandbyOptions{}); return err },
		"Start":          func() error { _, err := Start(ctx, dir, nil, StartOptions{}); return err },
		"Inherit":        func() error { return Inherit(dir, nil) },
		"AcquireScope": func() error {
			_, err := AcquireScope(ctx, dir, parent)
			return err
		},
	}
	for name, call := range calls {
		err := call()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), quoted, name)
		assert.Contains(t, err.Error(), "not valid UTF-8", name)
		assert.True(t, strings.HasPrefix(err.Error(), "runnerstate: "), name)
		_, statErr := os.Lstat(dir)
		assert.True(t, os.IsNotExist(statErr), "%s created %s", name, quoted)
	}
}

// Point 6: a record whose endpoint address is not valid UTF-8 is not
// published: what is stored must be what was bound.
func TestPublishRefusesANonUTF8Endpoint(t *testing.T) {
	dir := t.TempDir()
	release, err := Acquire(dir)
	require.NoError(t, err)
	defer release()
	addr := filepath.Join(dir, "d\xfe.sock")
	err = Publish(dir, Record{Endpoints: []Endpoint{{Network: "unix", Address: addr}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), strconv.Quote(addr))
	assert.Contains(t, err.Error(), "not valid UTF-8")
	assert.NoFileExists(t, filepath.Join(dir, RecordName), "nothing was published")
}
