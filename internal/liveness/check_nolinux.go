//go:build !linux

package liveness

// checkLive is Check's probe: pin, and let go of the pin at once.
func checkLive(id Identity) (Verdict, string) {
	p, v, why := pin(id)
	if p != nil {
		_ = p.Close()
	}
	return v, why
}

// checkAfter: without the kernel's per-process state, CheckHolder cannot
// lean on the caller's evidence; it checks as Check does.
func checkAfter(id Identity) (Verdict, string) { return checkLive(id) }
