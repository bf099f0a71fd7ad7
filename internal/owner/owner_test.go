package owner

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
)

// TestJudge: the rule, as data. alice is 1001, mallory 1002; root 0.
func TestJudge(t *testing.T) {
	const alice, mallory = 1001, 1002
	root := Part{Path: "/", UID: 0, Mode: 0o755}
	tmp := Part{Path: "/tmp", UID: 0, Mode: fs.ModeSticky | 0o777}
	dir := func(path string, uid int, mode fs.FileMode) Part { return Part{Path: path, UID: uid, Mode: mode} }
	for _, tc := range []struct {
		name    string
		parts   []Part
		missing bool
		euid    int
		access  Access
		fails   string // the failing part's path, "" when none
		why     Why
	}{
		{"own dir under sticky /tmp", []Part{root, tmp, dir("/tmp/a", alice, 0o700)}, false, alice, Write, "", 0},
		{"root's dir", []Part{root, dir("/run", 0, 0o755)}, false, alice, Write, "", 0},
		{"not there yet, under sticky /tmp", []Part{root, tmp}, true, alice, Write, "", 0},
		{"another user's dir", []Part{root, tmp, dir("/tmp/a", mallory, 0o755)}, false, alice, Write, "/tmp/a", NotOwned},
		{"another user's dir, read", []Part{root, tmp, dir("/tmp/a", mallory, 0o755)}, false, alice, Read, "", 0},
		{"another user's dir, root writes", []Part{root, tmp, dir("/tmp/a", mallory, 0o755)}, false, 0, Write, "", 0},
		{"world-writable dir", []Part{root, tmp, dir("/tmp/a", alice, 0o777)}, false, alice, Write, "/tmp/a", Writable},
		{"world-writable dir, read", []Part{root, tmp, dir("/tmp/a", mallory, 0o777)}, false, alice, Read, "/tmp/a", Writable},
		{"sticky shared dir", []Part{root, tmp, dir("/tmp/a", alice, fs.ModeSticky|0o777)}, false, alice, Write, "/tmp/a", Writable},
		{"group-writable dir", []Part{root, tmp, dir("/tmp/a", alice, 0o775)}, false, alice, Write, "/tmp/a", Writable},
		{"group-writable leaf in a 0700 parent (t.TempDir, umask 002)", []Part{root, tmp, dir("/tmp/T1", alice, 0o700), dir("/tmp/T1/001", alice, 0o775)}, false, alice, Write, "", 0},
		{"group-searchable parent does not hide", []Part{root, tmp, dir("/tmp/T1", alice, 0o710), dir("/tmp/T1/001", alice, 0o775)}, false, alice, Write, "/tmp/T1/001", Writable},
		{"writable ancestor", []Part{root, dir("/srv", 0, 0o777), dir("/srv/a", alice, 0o700)}, false, alice, Write, "/srv", Writable},
		{"writable ancestor, the dir not there yet", []Part{root, dir("/srv", 0, 0o777)}, true, alice, Write, "/srv", Writable},
		{"another user's ancestor", []Part{root, tmp, dir("/tmp/m", mallory, 0o755), dir("/tmp/m/a", alice, 0o700)}, false, alice, Write, "/tmp/m", NotOwned},
		{"the dir's owner's ancestor, read", []Part{root, dir("/home", 0, 0o755), dir("/home/svc", mallory, 0o755), dir("/home/svc/run", mallory, 0o755)}, false, alice, Read, "", 0},
		{"overflow owner", []Part{root, tmp, dir("/tmp/a", Overflow, 0o700)}, false, 0, Write, "/tmp/a", Overflowed},
		{"overflow owner, even as the caller", []Part{root, tmp, dir("/tmp/a", Overflow, 0o700)}, false, Overflow, Write, "/tmp/a", Overflowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Judge(tc.parts, tc.missing, tc.euid, tc.access, nil)
			if tc.fails == "" {
				assert.Nil(t, f)
				return
			}
			if assert.NotNil(t, f) {
				assert.Equal(t, tc.fails, f.Part.Path)
				assert.Equal(t, tc.why, f.Why)
			}
		})
	}
	shared := []Part{root, dir("/srv", 0, 0o777), dir("/srv/team", mallory, 0o777)}
	assert.NotNil(t, Judge(shared, false, alice, Write, nil))
	assert.Nil(t, Judge(shared, false, alice, Write, func(p string) bool { return p == "/srv" || p == "/srv/team" }), "opted in")
}

// TestLook: the parts of a real path, from "/" down, as fstat says; a path
// not there yet gives its deepest existing ancestor's.
func TestLook(t *testing.T) {
	dir, err := filepath.EvalSymlinks(testharness.TempDir(t)) // macOS: /var is /private/var
	if err != nil {
		t.Fatal(err)
	}
	parts, missing, err := Look(dir)
	if err != nil || parts == nil {
		t.Skipf("no owners to look at here: %v", err)
	}
	assert.False(t, missing)
	assert.Equal(t, "/", parts[0].Path)
	assert.Equal(t, dir, parts[len(parts)-1].Path)
	parts, missing, err = Look(dir + "/a/b")
	assert.NoError(t, err)
	assert.True(t, missing)
	assert.Equal(t, dir, parts[len(parts)-1].Path)
}

// BenchmarkCheck is what every checked call adds: the look from "/" down
// and the judgement (go test -bench Check ./internal/owner).
func BenchmarkCheck(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		if _, f, err := Check(dir, Read); err != nil || f != nil {
			b.Fatal(f, err)
		}
	}
}

// TestLookThroughASymlink: a symlink in the path is resolved, and the parts
// are those of where it leads.
func TestLookThroughASymlink(t *testing.T) {
	dir, err := filepath.EvalSymlinks(testharness.TempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, "link")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Skip(err)
	}
	parts, missing, err := Look(link)
	if err != nil || parts == nil {
		t.Skipf("no owners to look at here: %v", err)
	}
	assert.False(t, missing)
	assert.Equal(t, target, parts[len(parts)-1].Path)
	parts, missing, err = Look(filepath.Join(link, "below"))
	assert.NoError(t, err)
	assert.True(t, missing)
	assert.Equal(t, target, parts[len(parts)-1].Path)
}
