//go:build unix || windows

package runnerstate

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Case: the successors a leaving server hands its sockets to are the live
// starters that have a rendezvous, newest first, then the one admitted
// last; a starter that is gone, or takes no sockets, is not one.
func TestSuccessorsAreTheLiveStartersNewestFirstThenTheAdmitted(t *testing.T) {
	dir := tempDir(t)
	self := liveness.Identity(Self())
	gone := self
	gone.StartTicks++ // the same pid, another process: not live
	require.NoError(t, updateGate(background(t), dir, func(g *gateState) error {
		g.JoinAs(gateEntry{Starter: self, Since: time.Now(), Rendezvous: "@older"})
		g.JoinAs(gateEntry{Starter: gone, Since: time.Now(), Rendezvous: "@gone"})
		g.JoinAs(gateEntry{Starter: self, Since: time.Now()})
		g.JoinAs(gateEntry{Starter: self, Since: time.Now(), Rendezvous: "@newer"})
		g.Handover = "@admitted"
		return nil
	}))
	var got []string
	g, _ := readGate(dir)
	for _, s := range g.Successors() {
		got = append(got, s.Rendezvous)
		assert.Equal(t, s.Rendezvous == "@admitted", s.Admitted, s.Rendezvous)
	}
	assert.Equal(t, []string{"@newer", "@older", "@admitted"}, got)
	rep, err := Status(dir)
	require.NoError(t, err)
	assert.Len(t, rep.Waiting, 3, "the live starters, with a rendezvous or without")
}

// Case: a gate.json that cannot be read is an empty gate, with a warning
// that says what happens to it: replaced by the next Takeover when it is a
// file, refused when it is not one a writer may replace.
func TestReadGateSaysWhatBecomesOfAnUnreadableGate(t *testing.T) {
	dir := tempDir(t)
	path := filepath.Join(dir, gateName)
	require.NoError(t, os.WriteFile(path, []byte("{not json\n"), 0o600))
	g, warn := readGate(dir)
	assert.Empty(t, g.Waiting)
	assert.Contains(t, warn, "the next Takeover replaces it")

	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Mkdir(path, 0o700))
	_, warn = readGate(dir)
	assert.Contains(t, warn, "Takeover refuses the directory")
}

// Case: a starter killed while it waits is pruned from the gate: Status no
// longer shows it, and it blocks nobody.
func TestTakeoverDeadStarterIsPruned(t *testing.T) {
	dir := tempDir(t)
	old := startChild(t, "acquire", dir)
	old.Expect("acquired")
	s := startStarter(t, dir, TakeoverOptions{Grace: time.Minute}, childWait)
	eventually(t, "the starter waits", func() bool {
		st, err := Status(dir)
		return err == nil && len(st.Waiting) == 1
	})
	s.Kill()
	s.Wait()
	st, err := Status(dir)
	require.NoError(t, err)
	assert.Empty(t, st.Waiting, "a kill -9ed starter is not shown as waiting")
	require.NoError(t, old.Stop())
	// And it blocks nobody.
	release, err := Takeover(background(t), dir, TakeoverOptions{})
	require.NoError(t, err)
	release()
}
