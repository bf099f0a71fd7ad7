// Package fsinfo judges whether the kernel locks of a filesystem exclude:
// flock(2) excludes only the processes that reach a file through one
// kernel and one mount of it. On network filesystems (NFS, SMB/CIFS, 9p,
// AFS, Ceph, Lustre...) and every FUSE filesystem (sshfs, rclone, bindfs,
// virtiofs...) a lock taken through one mount or machine is invisible
// through another, so both processes hold it, silently.
//
// Linux reads the filesystem's magic number (one fstatfs(2)), and the type
// name from /proc/self/mountinfo only for a filesystem that does not
// exclude, cached per mount (by mount ID, never by device number, which
// FUSE and tmpfs reuse). macOS reads f_fstypename; Windows looks for a
// remote drive or a UNC path. Other systems are not judged.
//
// An operator who knows that every process reaches a directory through one
// mount on one machine trusts its type: the environment variable
// RUNNERSTATE_TRUST_FS (a comma-separated list of type names, read when the
// first filesystem that does not exclude is met) or Trust. Nothing here
// logs or knows which files the caller keeps.
package fsinfo

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// TrustEnv names the environment variable that lists trusted filesystem
// types, comma-separated, as mountinfo names them (fuse.gocryptfs,fuseblk).
const TrustEnv = "RUNNERSTATE_TRUST_FS"

// ErrNotExcluding is the answer for a filesystem whose locks do not exclude
// processes that reach it through another mount or machine. It comes as an
// *Error.
var ErrNotExcluding = errors.New("file locks on this filesystem do not exclude processes that reach it through another mount or machine")

// Error is a filesystem's locks judged not to exclude: by its type, or,
// when Holder is set, by proof (another process holds the same lock file
// through another mount at the same time).
type Error struct {
	Dir  string // the directory judged
	Type string // the filesystem's type, as mountinfo (or statfs) names it
	// Holder is the pid of a verified live process found holding the same
	// lock through another mount, and HolderPath the lock file as it
	// sees it; 0 and "" for a judgment by type.
	Holder     int
	HolderPath string
}

// Error says which filesystem's locks do not exclude, and how that is known.
func (e *Error) Error() string {
	if e.Holder > 0 {
		return "file locks on " + e.Dir + " (" + e.Type + ") do not exclude: another process holds the same lock through another mount"
	}
	return "file locks on " + e.Type + " (" + e.Dir + ") do not exclude processes that reach it through another mount or machine"
}

// Is reports whether target is ErrNotExcluding.
func (e *Error) Is(target error) bool { return target == ErrNotExcluding }

// Answer is a judgment of one filesystem, as a test hook gives it.
type Answer struct {
	Type     string // the type name, as mountinfo names it
	Excludes bool   // its locks exclude every process of the machine
}

var hook atomic.Pointer[func(dir string) (Answer, bool)]

// off, when set, skips every judgment (see Skip).
var off atomic.Bool

// Skip turns every judgment off until restore is called, so that a
// benchmark can price the check against the same lock without it. Never
// for anything else: with it, a lock on a filesystem that does not exclude
// is admitted.
func Skip() (restore func()) {
	off.Store(true)
	return func() { off.Store(false) }
}

// SetHook makes every judgment of a directory ask fn first: when it answers
// ok, that is the filesystem's answer (for tests of the filesystems this
// machine has no server for: NFS, CIFS, 9p, and the macOS and Windows
// cases). It returns a func that restores the previous hook.
func SetHook(fn func(dir string) (a Answer, ok bool)) (restore func()) {
	var p *func(string) (Answer, bool)
	if fn != nil {
		p = &fn
	}
	old := hook.Swap(p)
	return func() { hook.Store(old) }
}

// hooked is the hook's answer for dir, if a hook is set and answers.
func hooked(dir string) (Answer, bool) {
	if fn := hook.Load(); fn != nil {
		return (*fn)(dir)
	}
	return Answer{}, false
}

// The trusted types: the environment's, read once when first needed, plus
// those Trust added.
var trust = struct {
	sync.Mutex
	loaded bool
	types  []string
}{}

func loadTrust() {
	if trust.loaded {
		return
	}
	trust.loaded = true
	for _, t := range strings.Split(os.Getenv(TrustEnv), ",") {
		if t = strings.TrimSpace(t); t != "" {
			trust.types = append(trust.types, t)
		}
	}
}

// Trust adds types (as mountinfo names them) to the trusted ones, whose
// locks are taken as excluding, and returns a func that restores the list
// as it was.
func Trust(types ...string) (restore func()) {
	trust.Lock()
	defer trust.Unlock()
	loadTrust()
	old := slices.Clone(trust.types)
	for _, t := range types {
		if t = strings.TrimSpace(t); t != "" {
			trust.types = append(trust.types, t)
		}
	}
	return func() {
		trust.Lock()
		trust.types = old
		trust.Unlock()
	}
}

// Trusted reports whether typ is a trusted type.
func Trusted(typ string) bool {
	trust.Lock()
	defer trust.Unlock()
	loadTrust()
	return slices.Contains(trust.types, typ)
}

// verdict turns an answer for dir into the judgment: nil when its locks
// exclude or its type is trusted, else an *Error.
func verdict(dir string, a Answer) error {
	if a.Excludes || Trusted(a.Type) {
		return nil
	}
	return &Error{Dir: dir, Type: a.Type}
}

// Linux statfs(2) magic numbers of the filesystems whose locks do not
// exclude across mounts or machines, and the name each gives when
// mountinfo cannot be read (include/uapi/linux/magic.h and the filesystems'
// own headers).
var linuxNotExcluding = map[int64]string{
	0x6969:     "nfs",
	0x517b:     "smb",
	0xff534d42: "cifs",
	0xfe534d42: "smb3",
	0x01021997: "9p",
	0x65735546: "fuse", // every FUSE filesystem, virtiofs and fuseblk included
	0x5346414f: "afs",
	0x6b414653: "afs",
	0x00c36400: "ceph",
	0x73757245: "coda",
	0x564c:     "ncpfs",
	0x0bd00bd0: "lustre",
	0x47504653: "gpfs",
	0x20030528: "pvfs2",
	0x786f4256: "vboxsf",
	0x19830326: "fhgfs", // BeeGFS
}

// LinuxMagic says whether a Linux filesystem with statfs magic number
// magic excludes, and its name when it does not (the magic number's name,
// before mountinfo gives the exact one).
func LinuxMagic(magic int64) (excludes bool, name string) {
	name, ok := linuxNotExcluding[magic&0xffffffff]
	return !ok, name
}

// DarwinType judges a macOS filesystem by its f_fstypename: network
// filesystems and every FUSE one (macFUSE, osxfuse, fuse-t) do not exclude.
func DarwinType(name string) Answer {
	switch name {
	case "nfs", "smbfs", "afpfs", "webdav", "cifs", "ftp", "cd9660nfs":
		return Answer{Type: name}
	}
	for _, p := range []string{"fuse", "macfuse", "osxfuse"} {
		if strings.HasPrefix(name, p) {
			return Answer{Type: name}
		}
	}
	return Answer{Type: name, Excludes: true}
}

// WindowsPath judges a Windows path by its volume: a UNC path (\\server\share,
// \\?\UNC\server\share) is "unc", a mapped network drive (remote) is
// "remote"; anything else excludes, named fsName (NTFS, ReFS...).
func WindowsPath(volume string, remote bool, fsName string) Answer {
	v := strings.ReplaceAll(volume, "/", `\`)
	switch {
	case strings.HasPrefix(strings.ToUpper(v), `\\?\UNC\`):
		return Answer{Type: "unc"}
	case strings.HasPrefix(v, `\\?\`), strings.HasPrefix(v, `\\.\`):
	case strings.HasPrefix(v, `\\`):
		return Answer{Type: "unc"}
	}
	if remote {
		return Answer{Type: "remote"}
	}
	return Answer{Type: fsName, Excludes: true}
}

// ParseMountinfo returns the filesystem type (the field after " - ") of the
// first line of mountinfo data for device major:minor, or "".
func ParseMountinfo(data []byte, major, minor uint32) string {
	want := []byte(strconv.FormatUint(uint64(major), 10) + ":" + strconv.FormatUint(uint64(minor), 10))
	for line := range bytes.Lines(data) {
		fields := bytes.Fields(line)
		if len(fields) < 3 || !bytes.Equal(fields[2], want) {
			continue
		}
		for i, f := range fields {
			if string(f) == "-" && i+1 < len(fields) {
				return unescape(string(fields[i+1]))
			}
		}
	}
	return ""
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b = append(b, byte(n))
				i += 3
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}
