//go:build unix

package advice

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAdviseAddsTheCureAndKeepsTheError(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		says  string // "" when there is no advice
	}{
		{syscall.ENOSPC, "free space"},
		{syscall.EMFILE, "ulimit -n"},
		{syscall.EROFS, "read-write"},
		{syscall.ENOLCK, "local disk"},
		{syscall.ENOENT, ""},
	} {
		t.Run(tc.errno.Error(), func(t *testing.T) {
			in := &fs.PathError{Op: "write", Path: "/x/runner.json", Err: tc.errno}
			out := Advise(in)
			assert.ErrorIs(t, out, tc.errno, "errors.Is still finds the system's error")
			if tc.says == "" {
				assert.Same(t, in, out, "an error with no known cure comes back as it is")
				return
			}
			assert.Contains(t, out.Error(), tc.says)
			assert.Equal(t, out, Advise(out), "an error advised once is not advised again")
		})
	}
	assert.NoError(t, Advise(nil))
}

func TestDeniedOnlyForPermissionErrors(t *testing.T) {
	assert.Nil(t, Denied(t.TempDir()+"/runner.lock", fmt.Errorf("open: %w", syscall.ENOSPC)))
	assert.Nil(t, Denied(t.TempDir()+"/runner.lock", errors.New("other")))
}
