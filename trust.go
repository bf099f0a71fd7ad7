package runnerstate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/owner"
)

// checkName refuses a directory name that is not valid UTF-8, before
// anything is created in it: runner.json and the socket addresses derived
// from it are JSON, which would store such a name lossily, so that a client
// reads back another path than the one the runner took (one another user
// may have made). The name is quoted (%q) so that its bytes show.
func checkName(op, dir string) error {
	if !utf8.ValidString(dir) {
		return errorf("%s: the directory name %q is not valid UTF-8, and runner.json would store another path than this one; rename the directory, or name it by a path that is valid UTF-8", op, dir)
	}
	return nil
}

// checkEndpoints refuses a record whose endpoint addresses are not valid
// UTF-8: what is stored must be exactly what was bound (see checkName).
func checkEndpoints(dir string, eps []Endpoint) error {
	for i, ep := range eps {
		if !utf8.ValidString(ep.Address) {
			return errorf("Publish %s: endpoint %d's address %q is not valid UTF-8, and runner.json would store another address than the one bound; give one that is", dir, i, ep.Address)
		}
	}
	return nil
}

// aheadOf reports whether a state file's date t is more than a minute
// (gate.MaxAhead) after now: no writer of this machine's clock wrote it, so
// the entry or request it dates binds nobody (a forged gate.json entry or
// restart.json dated 2099 made every server step aside or leave).
func aheadOf(t time.Time) bool { return gate.Ahead(t, time.Now()) }

// voidWarnings are Status's lines for what binds nobody because it is dated
// ahead: the gate's starters, and the restart request.
func voidWarnings(dir string) []string {
	var out []string
	now := time.Now()
	g, _ := readGate(dir)
	for _, e := range g.Waiting {
		if e.Void(now) {
			out = append(out, fmt.Sprintf("%s names a waiting starter (pid %d) dated %s, more than %v ahead: it is void and binds nobody (no server waits for it or steps aside)",
				filepath.Join(dir, gateName), e.Starter.PID, e.Since.Format(time.RFC3339), gate.MaxAhead))
		}
	}
	if req, ok := readRestart(dir); ok && aheadOf(req.RequestedAt) {
		out = append(out, fmt.Sprintf("%s asks %q, dated %s, more than %v ahead: it is void and binds nobody (no runner leaves for it); a new request writes over it",
			filepath.Join(dir, RestartName), req.Mode, req.RequestedAt.Format(time.RFC3339), gate.MaxAhead))
	}
	return out
}

// ErrUntrustedDir reports a directory that someone other than this user
// (or root) could have put things in: it, or an ancestor, is owned by
// another user, or others may write it (an ancestor: unless it is sticky,
// as /tmp is; the directory itself: unless no other user can reach it).
// The calls that write, admit, signal or start refuse such a directory
// before they create anything in it, and Running refuses one that others
// can write: what is found there proves nothing. The error names the path,
// the part of it that fails, its owner and mode, and what to do. A
// directory shared on purpose is opted in with TrustDir or
// RUNNERSTATE_TRUST_DIRS. Windows has no owners or modes to check here:
// nothing is refused there (docs/guarantees.md).
var ErrUntrustedDir = errors.New("runnerstate: the directory is not one only its user (or root) controls")

// TrustDir opts dir in: it is used whatever its owner and mode, by every
// call of this process, for a directory shared on purpose (a team's
// daemon under a group; a Kubernetes emptyDir mounted 0777 in a pod whose
// processes all trust each other). It returns a func that restores the
// list as it was (for tests). The environment variable
// RUNNERSTATE_TRUST_DIRS (absolute paths, as filepath.SplitList splits
// them; read at first use) starts the list. An opted-in directory that is
// an ancestor of another passes as an ancestor too. Safe for concurrent
// use.
func TrustDir(dir string) (restore func()) { return owner.Trust(dir) }

// ownDir is checkDir for a call that writes, admits, signals or starts
// (docs/guarantees.md): dir, as its symlinks resolve, and each of its
// ancestors must be something only this user or root controls
// (owner.Judge), or it is refused with ErrUntrustedDir before anything is
// created (a dir not there yet: its ancestors; ensureDir makes it 0700). A
// look that fails (dir is a file, this user may not reach it) is left to
// the call, which names it as it always did.
func ownDir(op, dir string) error {
	if err := checkDir(op, dir); err != nil {
		return err
	}
	uid, f, err := owner.Check(dir, owner.Write)
	switch {
	case err != nil:
		return nil
	case f != nil:
		return &untrustedError{op: op, dir: dir, f: *f, access: owner.Write}
	}
	if s := strangers(dir, uid); len(s) > 0 {
		return &untrustedError{op: op, dir: dir, file: s[0], dirOwner: uid}
	}
	return nil
}

// ownFiles are the files of a runner or scope directory whose owner is
// checked: the lock files and the state files.
var ownFiles = []string{LockName, treeLockName, stateLockName, startLockName, RecordName, RestartName, gateName, startName, LingerName, scopeLockName, scopeOwnerName}

// strangers are dir's own files (ownFiles) owned by neither uid, dir's
// owner (-1: not checked), nor root, as fstatat of a descriptor of dir
// says: nobody else can have made them in a directory only its owner can
// write, unless it was once shared, and they prove nothing.
func strangers(dir string, uid int) []owner.Part {
	if uid < 0 {
		return nil
	}
	files, err := owner.Files(dir, ownFiles...)
	if err != nil {
		return nil
	}
	return owner.Strangers(files, uid)
}

// readDir is the check of a call that only reads (Running): a dir others
// can write is refused with ErrUntrustedDir, whoever owns it (any owner
// will do, as long as only it and root can write it).
func readDir(op, dir string) error {
	_, f, err := owner.Check(dir, owner.Read)
	if err != nil || f == nil {
		return nil
	}
	return &untrustedError{op: op, dir: dir, f: *f, access: owner.Read}
}

// untrustedError is ErrUntrustedDir for one directory and the part of it
// that fails.
type untrustedError struct {
	op       string
	dir      string
	f        owner.Failure
	access   owner.Access
	file     owner.Part // a file of dir another user owns, when that is what fails
	dirOwner int
}

func (e *untrustedError) Error() string {
	p := e.f.Part
	var b strings.Builder
	fmt.Fprintf(&b, "runnerstate: %s %s: ", e.op, e.dir)
	if e.file.Path != "" {
		fmt.Fprintf(&b, "%s is owned by %s, mode %s, not by the directory's owner (%s) or root: another user made it while the directory was open to others, so it proves nothing and may stall or mislead every runner; remove it (the directory's owner can), or, if the directory is shared on purpose, opt it in with %s=%s (or TrustDir)",
			e.file.Path, userWords(e.file.UID), modeWords(e.file.Mode), userWords(e.dirOwner), owner.TrustEnv, e.dir)
		return b.String()
	}
	which := "the directory itself"
	if abs, err := filepath.Abs(e.dir); err == nil && p.Path != abs {
		which = "an ancestor of it"
		if r, err := filepath.EvalSymlinks(abs); err == nil && r == p.Path {
			which = "where it leads"
		}
	}
	fmt.Fprintf(&b, "%s (%s) is owned by %s, mode %s", p.Path, which, userWords(p.UID), modeWords(p.Mode))
	switch e.f.Why {
	case owner.Overflowed:
		b.WriteString(": the overflow uid, which the kernel also shows for any owner a user namespace does not map, so it proves nobody's ownership")
	case owner.NotOwned:
		if e.access == owner.Write {
			fmt.Fprintf(&b, ", not by you (uid %d) or root", os.Geteuid())
		} else {
			fmt.Fprintf(&b, ", not by you (uid %d), root or the directory's owner", os.Geteuid())
		}
	case owner.Writable:
		b.WriteString(": other users can write it")
		if e.f.Part.Mode&fs.ModeSticky == 0 && which != "the directory itself" {
			b.WriteString(" and rename what is in it")
		}
	}
	b.WriteString(", so what is found there proves nothing and what is written there could be replaced; ")
	fmt.Fprintf(&b, "use a directory of your own ($XDG_RUNTIME_DIR/<app>, or %s created 0700)", filepath.Join(os.TempDir(), "<app>-"+strconv.Itoa(os.Geteuid())))
	if e.f.Why == owner.Writable {
		fmt.Fprintf(&b, ", or chmod go-w %s", p.Path)
	}
	fmt.Fprintf(&b, ", or, if it is shared on purpose, opt it in with %s=%s (or TrustDir)", owner.TrustEnv, e.dir)
	return b.String()
}

func (e *untrustedError) Is(target error) bool { return target == ErrUntrustedDir }

// userWords names uid, with its user name when it resolves.
func userWords(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// modeWords is a directory's mode as ls and chmod say it: 0755, 1777.
func modeWords(m fs.FileMode) string {
	n := uint32(m.Perm())
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return fmt.Sprintf("%04o", n)
}

// untrustedWarning is Status's warning for a directory Running refuses,
// or one for each of its files another user owns.
func untrustedWarning(dir string) []string {
	uid, f, err := owner.Check(dir, owner.Read)
	switch {
	case err != nil:
		return nil
	case f != nil:
		e := &untrustedError{op: "Status", dir: dir, f: *f, access: owner.Read}
		return []string{strings.TrimPrefix(e.Error(), "runnerstate: ")}
	}
	var out []string
	for _, s := range strangers(dir, uid) {
		e := &untrustedError{op: "Status", dir: dir, file: s, dirOwner: uid}
		out = append(out, strings.TrimPrefix(e.Error(), "runnerstate: "))
	}
	return out
}

// ownedFile reports whether the state file at path, read through a
// descriptor whose fstat said id, is evidence of anything: owned by root
// or by its directory's owner, in a directory opted in (TrustDir), or where
// owners cannot be told. Another user's is ignored by every reader (logged
// once, and Status warns naming it and its owner): nobody else can have
// made it in a directory only its owner can write, unless it was once
// shared, and what it says proves nothing.
func ownedFile(path string, id durable.FileID) bool {
	if owner.Evidence(path, id.UID) {
		return true
	}
	infoOnce("stranger:"+path, "runnerstate: ignoring a file another user owns", "path", path, "owner", userWords(id.UID))
	return false
}

// ownedLock refuses the lock file at path of dir, held through the
// descriptor fd, when another user owns it (owner.Evidence, on the fstat
// of fd: never a second lookup): ErrUntrustedDir naming it and its owner.
func ownedLock(op, dir, path string, fd uintptr) error {
	p, ok := owner.FileOf(fd, path)
	if !ok || owner.Evidence(path, p.UID) {
		return nil
	}
	return &untrustedError{op: op, dir: dir, file: p, dirOwner: owner.OwnerOf(dir)}
}

// otherUser says, for a lock's holder pid, that it is another user's
// process ("; held by uid 1002 (mallory), not you"), so that a refusal
// names the cause a user can act on; "" when it is this user's or cannot
// be told (off Linux).
func otherUser(pid int) string {
	uid := owner.ProcessUID(pid)
	if uid < 0 || uid == os.Geteuid() {
		return ""
	}
	return "; held by " + userWords(uid) + ", not you"
}
