// Command spawn counts how often process creation fails under Wine: it
// starts itself n times, par at a time, each child with pipes to its stdin
// and stdout as the tests' children have, and prints the failures by error.
// With -kill each child waits on its stdin and is killed at once, as a
// test's cleanup kills its children.
//
// Under Wine 8.0, CreateProcess has once failed in CI with "Internal error"
// (ERROR_INTERNAL_ERROR): NtCreateUserProcess answers STATUS_INTERNAL_ERROR
// when the new process ended before its startup completed, leaving no exit
// status. internal/testharness starts such a child again. It is rare: none
// in 6,800 starts on a 2-core machine, CPU hogs beside it or not.
//
//	GOOS=windows GOARCH=amd64 go build -o spawn.exe ./.ci/windows/repro/spawn
//	wine64 spawn.exe -n 3000 -par 8   # prints "3000 starts, ... failures: map[]"
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		if len(os.Args) > 2 {
			os.Stdin.Read(make([]byte, 1)) // -kill: wait to be killed
		}
		return
	}
	n := flag.Int("n", 1000, "children to start in all")
	par := flag.Int("par", 4, "children started at a time")
	kill := flag.Bool("kill", false, "kill each child as soon as it has started")
	flag.Parse()

	var mu sync.Mutex
	fails := map[string]int{}
	fail := func(what string) {
		mu.Lock()
		fails[what]++
		mu.Unlock()
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for range *par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range *n / *par {
				args := []string{"child"}
				if *kill {
					args = append(args, "wait")
				}
				cmd := exec.Command(os.Args[0], args...)
				stdin, err := cmd.StdinPipe()
				if err != nil {
					fail("stdin pipe: " + err.Error())
					continue
				}
				if _, err := cmd.StdoutPipe(); err != nil {
					fail("stdout pipe: " + err.Error())
					continue
				}
				if err := cmd.Start(); err != nil {
					fail("start: " + err.Error())
					continue
				}
				if *kill {
					cmd.Process.Kill()
				}
				stdin.Close()
				if err := cmd.Wait(); err != nil && !*kill {
					fail("wait: " + err.Error())
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%d starts, %d at a time, in %v; failures: %v\n", *n / *par * *par, *par, time.Since(t0).Round(time.Millisecond), fails)
	if len(fails) > 0 {
		os.Exit(1)
	}
}
