package dirwatch

import "context"

// Until returns a context that ends with ctx or as soon as done, asked at
// each wake-up of a watch of dir, reports true; stop ends the watch and
// waits for its goroutine to exit.
func Until(ctx context.Context, dir string, done func() bool) (_ context.Context, stop func()) {
	uctx, cancel := context.WithCancel(ctx)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		w := New(dir)
		defer w.Close()
		for w.Wait(uctx, 0, nil) == nil {
			if done() {
				cancel()
				return
			}
		}
	}()
	return uctx, func() { cancel(); <-exited }
}
