package liveness

// SetProbeHook makes fn be called with every pid before it is probed, and
// returns a func that removes it. For tests of the packages above this one
// that must prove a pid was never probed; not safe for concurrent use with
// probes.
func SetProbeHook(fn func(pid int)) (restore func()) {
	old := testHookProbe
	testHookProbe = fn
	return func() { testHookProbe = old }
}

// SetSignalHook makes fn be called before every signal is sent, and returns a
// func that removes it. For tests that must prove no signal was sent.
func SetSignalHook(fn func(pid int, sig Signal)) (restore func()) {
	old := testHookSignal
	testHookSignal = fn
	return func() { testHookSignal = old }
}
