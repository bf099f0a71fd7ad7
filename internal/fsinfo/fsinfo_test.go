package fsinfo

import (
	"errors"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLinuxMagic(t *testing.T) {
	for _, c := range []struct {
		magic    int64
		excludes bool
		name     string
	}{
		{0xef53, true, ""},                  // ext4
		{0x01021994, true, ""},              // tmpfs
		{0x9123683e, true, ""},              // btrfs
		{0x58465342, true, ""},              // xfs
		{0x794c7630, true, ""},              // overlayfs
		{0x6969, false, "nfs"},              // nfs, nfs4
		{0xff534d42, false, "cifs"},         // cifs
		{0xfe534d42, false, "smb3"},         // smb2/3
		{0x517b, false, "smb"},              // smbfs
		{0x01021997, false, "9p"},           // v9fs
		{0x65735546, false, "fuse"},         // every FUSE filesystem, virtiofs too
		{0x00c36400, false, "ceph"},         // ceph
		{0x0bd00bd0, false, "lustre"},       // lustre
		{0x6b414653, false, "afs"},          // kAFS
		{-0x00acb2be, false, "cifs"},        // a 32-bit f_type sign-extended (0xff534d42)
		{0x47504653, false, "gpfs"},         // GPFS
		{0x786f4256, false, "vboxsf"},       // VirtualBox shared folders
		{0x20030528, false, "pvfs2"},        // OrangeFS
		{0x564c, false, "ncpfs"},            // NetWare
		{0x01161970, true, ""},              // gfs2: cluster locks through its DLM
		{0x00000000, true, ""},              // unknown: not judged
		{0x12345678, true, ""},              // unknown: not judged
		{0x7366746e, true, ""},              // ntfs3
		{0x65735543, true, ""},              // fusectl: not a FUSE mount itself
		{0xf15f, true, ""},                  // ecryptfs: a local stack
		{0x4244, true, ""},                  // hfs
		{0x6e667364, true, ""},              // nfsd's own control fs: local
		{0x67596969, true, ""},              // rpc_pipefs: local
		{0x7461636f, true, ""},              // ocfs2: cluster locks
		{0x65735546 | 1<<32, false, "fuse"}, // a 64-bit f_type carrying high bits
	} {
		excludes, name := LinuxMagic(c.magic)
		assert.Equal(t, c.excludes, excludes, "magic %#x", c.magic)
		assert.Equal(t, c.name, name, "magic %#x", c.magic)
	}
}

func TestDarwinType(t *testing.T) {
	for name, excludes := range map[string]bool{
		"apfs": true, "hfs": true, "msdos": true, "exfat": true, "devfs": true,
		"nfs": false, "smbfs": false, "afpfs": false, "webdav": false, "cifs": false, "ftp": false,
		"macfuse": false, "osxfuse": false, "fusefs": false, "fuse-t": false,
	} {
		a := DarwinType(name)
		assert.Equal(t, excludes, a.Excludes, name)
		assert.Equal(t, name, a.Type)
	}
}

func TestWindowsPath(t *testing.T) {
	for _, c := range []struct {
		volume   string
		remote   bool
		fsName   string
		excludes bool
		typ      string
	}{
		{`C:`, false, "NTFS", true, "NTFS"},
		{`D:`, false, "ReFS", true, "ReFS"},
		{`Z:`, true, "", false, "remote"},
		{`\\server\share`, false, "", false, "unc"},
		{`//server/share`, false, "", false, "unc"},
		{`\\?\UNC\server\share`, false, "", false, "unc"},
		{`\\?\unc\server\share`, false, "", false, "unc"},
		{`\\?\C:`, false, "NTFS", true, "NTFS"},
		{`\\.\C:`, false, "NTFS", true, "NTFS"},
		{`\\?\Z:`, true, "", false, "remote"},
	} {
		a := WindowsPath(c.volume, c.remote, c.fsName)
		assert.Equal(t, c.excludes, a.Excludes, c.volume)
		assert.Equal(t, c.typ, a.Type, c.volume)
	}
}

func TestParseMountinfo(t *testing.T) {
	data := []byte(`22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
27 22 0:25 / /tmp rw,nosuid,nodev shared:2 - tmpfs tmpfs rw
42 27 0:39 / /tmp/a\040b rw,nosuid,nodev,relatime - fuse.bindfs /tmp/r rw,user_id=0
43 27 0:40 / /mnt/n rw,relatime shared:7 master:1 - nfs4 srv:/x rw,vers=4.2
44 27 0:41 / /mnt/odd rw - fuse.my\040fs x rw
garbage line
`)
	assert.Equal(t, "ext4", ParseMountinfo(data, 254, 0))
	assert.Equal(t, "tmpfs", ParseMountinfo(data, 0, 25))
	assert.Equal(t, "fuse.bindfs", ParseMountinfo(data, 0, 39))
	assert.Equal(t, "nfs4", ParseMountinfo(data, 0, 40))
	assert.Equal(t, "fuse.my fs", ParseMountinfo(data, 0, 41))
	assert.Equal(t, "", ParseMountinfo(data, 0, 99))
	assert.Equal(t, "", ParseMountinfo(nil, 0, 25))
}

// resetTrust forgets the trusted types and that the environment was read,
// until the test ends.
func resetTrust(t *testing.T) {
	trust.Lock()
	loaded, types := trust.loaded, trust.types
	trust.loaded, trust.types = false, nil
	trust.Unlock()
	t.Cleanup(func() {
		trust.Lock()
		trust.loaded, trust.types = loaded, types
		trust.Unlock()
	})
}

func TestTrustFromEnvironment(t *testing.T) {
	resetTrust(t)
	t.Setenv(TrustEnv, " fuse.gocryptfs, fuseblk ,,")
	assert.True(t, Trusted("fuse.gocryptfs"))
	assert.True(t, Trusted("fuseblk"))
	assert.False(t, Trusted("nfs4"))
	assert.False(t, Trusted(""))
	// Read once: a later change is not seen.
	t.Setenv(TrustEnv, "nfs4")
	assert.False(t, Trusted("nfs4"))
}

func TestTrustAddsAndRestores(t *testing.T) {
	resetTrust(t)
	t.Setenv(TrustEnv, "fuseblk")
	restore := Trust("nfs4", "cifs")
	assert.True(t, Trusted("nfs4"))
	assert.True(t, Trusted("cifs"))
	assert.True(t, Trusted("fuseblk"), "the environment's types stay")
	restore()
	assert.False(t, Trusted("nfs4"))
	assert.True(t, Trusted("fuseblk"))
}

func TestHookJudges(t *testing.T) {
	resetTrust(t)
	t.Setenv(TrustEnv, "")
	restore := SetHook(func(dir string) (Answer, bool) {
		if dir == "nfs" {
			return Answer{Type: "nfs4"}, true
		}
		return Answer{}, false
	})
	defer restore()
	err := JudgeDir("nfs")
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrNotExcluding))
	var fe *Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "nfs4", fe.Type)
	assert.Equal(t, "nfs", fe.Dir)
	assert.Equal(t, "nfs4", TypeOf("nfs"))
	assert.NoError(t, JudgeDir(testharness.TempDir(t)), "a directory the hook does not answer for is judged for real")
	defer Trust("nfs4")()
	assert.NoError(t, JudgeDir("nfs"))
}

// FuzzParseMountinfo: any mountinfo text, however broken, gives a type or
// "" and never panics; a line for the device gives its type back.
func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte("42 27 0:39 / /tmp/a rw - fuse.bindfs /tmp/r rw\n"), uint32(0), uint32(39))
	f.Add([]byte("1 2 3:4 / / - \\\n- -\n"), uint32(3), uint32(4))
	f.Add([]byte(" - \\04"), uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, data []byte, major, minor uint32) {
		typ := ParseMountinfo(data, major, minor)
		if len(typ) > len(data) {
			t.Fatalf("type %q longer than the input", typ)
		}
	})
}
