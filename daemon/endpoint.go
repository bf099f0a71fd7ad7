package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/runnerstate/runnerstate"
)

// maxSunPath is the longest unix socket path bind accepts: sun_path holds
// 108 bytes on Linux and 104 on macOS and the BSDs, the last for the NUL.
func maxSunPath() int {
	if runtime.GOOS == "linux" {
		return 107
	}
	return 103
}

// endpoint is one of Options.Endpoints, resolved: a unix Address joined to
// dir when relative; key is what a handed-over socket is matched by.
type endpoint struct {
	runnerstate.Endpoint
	abstract bool // a Linux abstract unix socket ("@name"): no file
}

// key matches a socket a predecessor hands over to this endpoint: the
// network and the configured address (resolved for a unix one), so that
// "127.0.0.1:0" keeps the port it was given.
func (e endpoint) key() string { return e.Network + " " + e.Address }

// resolveEndpoints checks and resolves opts' endpoints, before anything is
// taken or created: all that can be known without binding (a unix path's
// length; a TCP port's range, a host's syntax, family and locality), so
// that a build whose endpoint cannot bind never takes a server's place.
func resolveEndpoints(ctx context.Context, dir string, eps []runnerstate.Endpoint) ([]endpoint, error) {
	addrs := make([]string, len(eps))
	for i, ep := range eps {
		addrs[i] = ep.Address
	}
	if err := checkNames("Listen", dir, addrs...); err != nil {
		return nil, err
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("daemon: Listen %s: no Endpoints: give at least one (for example {Network: \"unix\", Address: \"daemon.sock\"})", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, &fs.PathError{Op: "daemon: Listen", Path: dir, Err: err}
	}
	out := make([]endpoint, 0, len(eps))
	seen := map[string]bool{}
	for i, ep := range eps {
		e := endpoint{Endpoint: ep}
		switch ep.Network {
		case "unix":
			switch {
			case ep.Address == "":
				return nil, fmt.Errorf("daemon: endpoint %d (unix): no Address; give a socket path, relative to %s or absolute", i, dir)
			case strings.HasPrefix(ep.Address, "@"):
				if runtime.GOOS != "linux" {
					return nil, fmt.Errorf("daemon: endpoint %d (unix %q): an abstract socket (@name) exists only on Linux", i, ep.Address)
				}
				e.abstract = true
			case !filepath.IsAbs(ep.Address):
				e.Address = filepath.Join(abs, ep.Address)
			}
			if n := len(e.Address); n > maxSunPath() {
				return nil, fmt.Errorf("daemon: endpoint %d (unix %s): the path is %d bytes, over the %d a unix socket address holds on %s; use a shorter directory or Address", i, e.Address, n, maxSunPath(), runtime.GOOS)
			}
		case "tcp", "tcp4", "tcp6":
			if err := checkTCP(ctx, ep); err != nil {
				return nil, fmt.Errorf("daemon: endpoint %d (%s %q): %w", i, ep.Network, ep.Address, err)
			}
		default:
			return nil, fmt.Errorf("daemon: endpoint %d: network %q is not one of unix, tcp, tcp4, tcp6", i, ep.Network)
		}
		if err := checkMode(i, e); err != nil {
			return nil, err
		}
		if seen[e.key()] {
			return nil, fmt.Errorf("daemon: endpoint %d (%s %s) is given twice", i, e.Network, e.Address)
		}
		seen[e.key()] = true
		out = append(out, e)
	}
	return out, nil
}

// checkTCP checks what a TCP bind would refuse and can be known without
// binding: host:port syntax, the port's range (or service name), and a
// host that is an address of this machine (a name is resolved, bounded by
// ctx) in the network's family.
func checkTCP(ctx context.Context, ep runnerstate.Endpoint) error {
	host, port, err := net.SplitHostPort(ep.Address)
	if err != nil {
		return fmt.Errorf("%v; give host:port (port 0 picks one)", err)
	}
	if _, err := net.LookupPort(ep.Network, port); err != nil {
		return fmt.Errorf("%v; give a port from 0 to 65535 (0 picks one)", err)
	}
	if host == "" {
		return nil // every address of the machine
	}
	var ips []net.IP
	if ip := net.ParseIP(strings.SplitN(host, "%", 2)[0]); ip != nil {
		ips = []net.IP{ip}
	} else {
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return fmt.Errorf("the host cannot be resolved: %v; give an address of this machine (127.0.0.1, or empty for all)", err)
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	local, err := localAddrs()
	if err != nil {
		return nil // cannot tell: the bind will
	}
	var why string
	for _, ip := range ips {
		switch {
		case ep.Network == "tcp4" && ip.To4() == nil:
			why = fmt.Sprintf("%s is not an IPv4 address", ip)
		case ep.Network == "tcp6" && ip.To4() != nil:
			why = fmt.Sprintf("%s is not an IPv6 address", ip)
		case ip.IsUnspecified() || ip.IsLoopback() || local[ip.String()]:
			return nil
		default:
			why = fmt.Sprintf("%s is not an address of this machine", ip)
		}
	}
	return fmt.Errorf("%s; give one that is (127.0.0.1, or empty for all)", why)
}

// localAddrs are the addresses of this machine's interfaces.
func localAddrs() (map[string]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			out[n.IP.String()] = true
		}
	}
	return out, nil
}

// socketFile is the identity of the file a unix socket is bound to, so that
// a server removes only its own (a successor's, bound anew at the same path,
// is never removed).
type socketFile struct {
	path string
	info os.FileInfo // nil: none to remove (abstract, or not a unix socket)
}

// fileOf records the file at e's path now, for a socket this server has.
func fileOf(e endpoint) socketFile {
	if e.Network != "unix" || e.abstract {
		return socketFile{}
	}
	fi, err := os.Lstat(e.Address)
	if err != nil || fi.Mode().Type() != fs.ModeSocket {
		return socketFile{path: e.Address}
	}
	return socketFile{path: e.Address, info: fi}
}

// remove removes the socket file only while it is still the one recorded.
func (f socketFile) remove() {
	if f.info == nil {
		return
	}
	if fi, err := os.Lstat(f.path); err == nil && os.SameFile(fi, f.info) {
		os.Remove(f.path)
	}
}

// errAlive is what bind finds at a unix path where a server answers.
var errAlive = errors.New("a server is listening there")

// bind listens on e anew. A unix socket file left by a dead server (a dial
// is refused) is replaced; one where a server answers, or a path that is not
// a socket, is refused naming the path.
func bind(e endpoint) (net.Listener, error) {
	if e.Network == "unix" && !e.abstract {
		if err := clearDeadSocket(e.Address); err != nil {
			return nil, err
		}
	}
	lc := net.ListenConfig{Control: bindControl(e)}
	ln, err := lc.Listen(context.Background(), e.Network, e.Address)
	if err != nil {
		return nil, fmt.Errorf("daemon: listen on %s %s: %w", e.Network, e.Address, err)
	}
	if ul, ok := ln.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false) // the server removes its own file, and only its own
	}
	return ln, nil
}

// clearDeadSocket removes a dead server's socket file at path; nothing to
// do when there is none.
func clearDeadSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("daemon: listen on unix %s: %w", path, err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("daemon: listen on unix %s: the path is a %s, not a socket; move it away or choose another Address", path, kindOf(fi))
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("daemon: listen on unix %s: %w (not a server of this directory's: it may be a child of a killed server that inherited the socket); stop it, or choose another Address", path, errAlive)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("daemon: listen on unix %s: cannot tell whether the socket there is alive: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("daemon: listen on unix %s: remove a dead server's socket: %w", path, err)
	}
	return nil
}

func kindOf(fi os.FileInfo) string {
	switch {
	case fi.IsDir():
		return "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		return "symlink"
	case fi.Mode().IsRegular():
		return "regular file"
	}
	return "special file"
}
