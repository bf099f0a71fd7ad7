package liveness

// SetProbeHook makes fn be called with every pid before it is probed, and
// returns a func that removes it. For tests of the packages above this one
// that must prove a pid was never probed.
func SetProbeHook(fn func(pid int)) (restore func()) {
	old := testHookProbe.Swap(&fn)
	return func() { testHookProbe.Store(old) }
}

// SetSignalHook makes fn be called before every signal is sent, and returns a
// func that removes it. For tests that must prove no signal was sent.
func SetSignalHook(fn func(pid int, sig Signal)) (restore func()) {
	old := testHookSignal.Swap(&fn)
	return func() { testHookSignal.Store(old) }
}
