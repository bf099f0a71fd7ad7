package handoff

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dir is a directory whose pair is free, or held (held), with a gate kept
// in memory; it counts what a Wait asked of it. Enter loses the pair while
// lose is above zero: a fault the kernel does not give on demand.
type dir struct {
	held    Held
	lose    int
	g       gate.State
	entered int
	targets int
}

var errBusy = errors.New("busy")

func (d *dir) Enter(context.Context, int) (string, error) {
	d.entered++
	if d.lose > 0 {
		d.lose--
		return "", ErrLost
	}
	return "hold", nil
}
func (d *dir) Lost(n int) error        { return fmt.Errorf("lost %d", n) }
func (d *dir) Try() (int, Held, error) { return 1, d.held, nil }
func (d *dir) Target(Held) (Target, bool, error) {
	d.targets++
	return Target{Key: "k", Grace: gate.Unending}, true, nil
}
func (d *dir) AwaitFree(ctx context.Context, _ Held) (bool, error) { <-ctx.Done(); return false, nil }
func (d *dir) ReadGate() gate.State                                { return d.g }
func (d *dir) UpdateGate(_ context.Context, fn func(g *gate.State) error) error {
	return fn(&d.g)
}
func (d *dir) Ask(*gate.State, int) error { return nil }
func (d *dir) Orphans() ([]int, bool)     { return nil, true }
func (d *dir) Busy(cause error) error     { return errors.Join(errBusy, cause) }
func (d *dir) Superseded() error          { return ErrNotNewest }
func (d *dir) Report(Event)               {}
func (d *dir) wait(t *testing.T) *Wait[int, string] {
	return &Wait[int, string]{Dir: testharness.TempDir(t), Seq: 1, KillAfter: time.Second, Protocol: d}
}

// TestRunTakesThePairAgainWhenEnterLostIt: a pair lost in admission is
// taken again, MaxLost times at most; after that Run answers Lost with the
// count.
func TestRunTakesThePairAgainWhenEnterLostIt(t *testing.T) {
	d := &dir{lose: MaxLost}
	h, err := d.wait(t).Run(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "hold", h)
	assert.Equal(t, MaxLost+1, d.entered)

	d = &dir{lose: MaxLost + 1}
	_, err = d.wait(t).Run(context.Background())
	require.EqualError(t, err, "lost 17")
	assert.Equal(t, MaxLost+1, d.entered)
}

// TestAnEndedContextGetsOneTryAndNoStep: with ctx already ended and the
// pair held, Run answers Busy wrapping ctx's error, and takes no step (so
// asks and signals nothing).
func TestAnEndedContextGetsOneTryAndNoStep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := &dir{held: LockHeld}
	_, err := d.wait(t).Run(ctx)
	require.ErrorIs(t, err, errBusy)
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, d.targets, "no step")
	assert.Zero(t, d.entered)
}

// TestANewerStarterSupersedes: a starter admitted after this one ends the
// wait, with Superseded, before any step.
func TestANewerStarterSupersedes(t *testing.T) {
	d := &dir{held: LockHeld, g: gate.State{Admitted: 2}}
	_, err := d.wait(t).Run(context.Background())
	require.ErrorIs(t, err, ErrNotNewest)
	assert.Zero(t, d.targets)
}
