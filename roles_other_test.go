//go:build (unix || windows) && !linux

package runnerstate

import "fmt"

// The roles only Linux tests start (roles_linux_test.go), in roles_test.go's
// table everywhere: here a child asked to play one says so and fails.

func roleChaosStarter(string) int { return linuxOnlyRole("chaos-starter") }
func roleCrashWriter(string) int  { return linuxOnlyRole("crash-writer") }
func roleOps(string) int          { return linuxOnlyRole("ops") }
func roleTreeRunner(string) int   { return linuxOnlyRole("tree-runner") }
func roleChaosWorker(string) int  { return linuxOnlyRole("chaos-worker") }
func roleMmapPin(string) int      { return linuxOnlyRole("mmap-pin") }

func linuxOnlyRole(name string) int {
	say("error %s", fmt.Sprintf("the %q role needs Linux", name))
	return 2
}
