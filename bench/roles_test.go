//go:build linux

package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"github.com/runnerstate/runnerstate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"golang.org/x/sys/unix"
)

// The child processes of the benchmarks. Each says "ready" (or waits for a
// command) on stdout and takes commands on stdin.
var roles = testharness.Roles{
	// hold-locks: read n from stdin, take n flock locks on files in dir,
	// say "ready", hold them until stdin closes.
	"hold-locks": func(dir string) int {
		cmds := testharness.Commands()
		n, _ := strconv.Atoi(<-cmds)
		var fds []int
		for i := range n {
			fd, err := unix.Open(filepath.Join(dir, strconv.Itoa(i)), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return fail(err)
			}
			if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
				return fail(err)
			}
			fds = append(fds, fd)
		}
		fmt.Println("ready")
		for range cmds {
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		return 0
	},
	// read-lock-table: read /proc/locks whole in a loop, as lslocks or a
	// monitoring agent does, until stdin closes.
	"read-lock-table": func(string) int {
		done := make(chan struct{})
		go func() { drain(); close(done) }()
		fmt.Println("ready")
		buf := make([]byte, 1<<20)
		for {
			select {
			case <-done:
				return 0
			default:
			}
			fd, err := unix.Open("/proc/locks", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fail(err)
			}
			for {
				if n, err := unix.Read(fd, buf); n <= 0 || err != nil {
					break
				}
			}
			unix.Close(fd)
		}
	},
	// churn-locks: start processes, one after another, that each take a
	// flock on a file in dir and exit holding it (the kernel drops it), until
	// stdin closes.
	"churn-locks": func(dir string) int {
		done := make(chan struct{})
		go func() { drain(); close(done) }()
		fmt.Println("ready")
		for i := 0; ; i++ {
			select {
			case <-done:
				return 0
			default:
			}
			cmd := testharness.Command(filepath.Join(dir, strconv.Itoa(i%64)))
			cmd.Env = append(os.Environ(), testharness.RoleEnv+"=lock-and-exit")
			if err := cmd.Run(); err != nil {
				return fail(err)
			}
		}
	},
	// lock-and-exit: take an exclusive flock on the file and exit holding it.
	"lock-and-exit": func(path string) int {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fail(err)
		}
		if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
			return fail(err)
		}
		return 0
	},
	// hold-runner: Acquire and Publish dir, hold until stdin closes.
	"hold-runner": func(dir string) int {
		release, err := runnerstate.Acquire(dir)
		if err != nil {
			return fail(err)
		}
		defer release()
		if err := runnerstate.Publish(dir, runnerstate.Record{MaxParallel: 2}); err != nil {
			return fail(err)
		}
		fmt.Println("ready")
		drain()
		return 0
	},
	// obey-runner: a runner that exits at once when asked to restart.
	"obey-runner": func(dir string) int {
		release, err := runnerstate.Acquire(dir)
		if err != nil {
			return fail(err)
		}
		defer release()
		if err := runnerstate.Publish(dir, runnerstate.Record{}); err != nil {
			return fail(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		restarts := runnerstate.WatchRestart(ctx, dir)
		fmt.Println("ready")
		<-restarts
		return 0
	},
	"handoff-runnerstate": handoff(func(path string) func() {
		unlock, err := runnerstate.Lock(context.Background(), path)
		if err != nil {
			os.Exit(fail(err))
		}
		return unlock
	}),
	"handoff-flock-blocking": handoff(blockingFlock),
	"handoff-gofrs-poll-10ms": handoff(func(path string) func() {
		f := flock.New(path)
		if ok, err := f.TryLockContext(context.Background(), 10*time.Millisecond); err != nil || !ok {
			os.Exit(fail(fmt.Errorf("gofrs: %v %v", ok, err)))
		}
		return func() { f.Unlock() }
	}),
	"contend-runnerstate": contend(func(path string) func() {
		unlock, err := runnerstate.Lock(context.Background(), path)
		if err != nil {
			os.Exit(fail(err))
		}
		return unlock
	}),
	"contend-flock-blocking": contend(blockingFlock),
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "role:", err)
	return 1
}

func drain() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
	}
}

// blockingFlock is the floor: open, blocking flock(LOCK_EX), and close to
// release.
func blockingFlock(path string) func() {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		os.Exit(fail(err))
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		os.Exit(fail(err))
	}
	return func() { unix.Close(fd) }
}

// handoff: on each "go", say "waiting", wait for the lock, say "locked
// <CLOCK_MONOTONIC ns>", release it and say "released".
func handoff(lock func(path string) func()) func(string) int {
	return func(path string) int {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println("waiting")
			unlock := lock(path)
			t1 := monotonic()
			fmt.Println("locked", t1)
			unlock()
			fmt.Println("released")
		}
		return 0
	}
}

// contend: say "ready"; on "<n>", lock and unlock n times as fast as it can,
// then say "waits" and every wait in nanoseconds.
func contend(lock func(path string) func()) func(string) int {
	return func(path string) int {
		fmt.Println("ready")
		sc := bufio.NewScanner(os.Stdin)
		if !sc.Scan() {
			return 0
		}
		n, _ := strconv.Atoi(sc.Text())
		waits := make([]string, 0, n)
		for range n {
			t := time.Now()
			unlock := lock(path)
			waits = append(waits, strconv.FormatInt(int64(time.Since(t)), 10))
			unlock()
		}
		fmt.Println("waits", strings.Join(waits, " "))
		drain()
		return 0
	}
}
