package durable

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// FuzzTempWriterTag feeds the names of temporary files, which anyone who can
// write the directory can choose. A name is only ever evidence against its
// writer when it is of this boot and PID namespace, and no pid <= 0 is ever
// probed.
func FuzzTempWriterTag(f *testing.F) {
	self := strings.Split(WriterTag(), "-")
	f.Add(WriterTag() + "-abcdef")
	f.Add("1-1-" + self[2] + "-x")
	f.Add("0-5-" + self[2] + "-x")
	f.Add("-1-5-" + self[2] + "-x")
	f.Add("99999999999999-5-" + self[2] + "-x")
	f.Add("1-1-ffffffff-x")
	f.Fuzz(func(t *testing.T, tag string) {
		var probed []int
		defer liveness.SetProbeHook(func(pid int) { probed = append(probed, pid) })()
		gone := WriterGone(tag)
		for _, pid := range probed {
			if pid <= 0 {
				t.Fatalf("tag %q probed pid %d", tag, pid)
			}
		}
		parts := strings.Split(tag, "-")
		if gone && (len(parts) != 4 || parts[2] != self[2]) {
			t.Fatalf("tag %q of another boot or namespace was judged gone", tag)
		}
		if gone && parts[0] == self[0] && parts[1] == self[1] {
			t.Fatalf("this very process was judged gone from %q", tag)
		}
	})
}

// A missing directory on the way to a file is a missing file, on every
// platform; a file where a directory belongs is "not a directory". (Windows
// answers ERROR_PATH_NOT_FOUND for both, which Go calls ENOTDIR.)
func TestReadFileMissingDirIsNotExist(t *testing.T) {
	dir := testharness.TempDir(t)
	_, err := ReadFile(filepath.Join(dir, "absent", "f"), 16)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.NotErrorIs(t, err, syscall.ENOTDIR)

	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = ReadFile(filepath.Join(file, "f"), 16)
	assert.ErrorIs(t, err, syscall.ENOTDIR)
}

// A reader never makes a removal fail: a file held open for reading, as
// ReadFile holds it, can be removed (on Windows: because the reader shares
// delete access). durable_windows_test.go shows the same of a replace.
func TestReaderNeverStopsRemoval(t *testing.T) {
	dir := testharness.TempDir(t)
	path := filepath.Join(dir, "state")
	require.NoError(t, Write(dir, "state", []byte("v0")))
	f, err := openRead(path)
	require.NoError(t, err)
	assert.NoError(t, Remove(dir, "state"), "removed while a reader has it open")
	require.NoError(t, f.Close())
	assert.NoFileExists(t, path)
}
