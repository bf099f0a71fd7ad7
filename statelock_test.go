//go:build unix || windows

package runnerstate

import (
	"context"
	"go/ast"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStateLockIsNeverAskedForUnderIt: the state lock is not reentrant, so
// code that holds it (a func given the stateHeld token, a function that
// takes one, a func updateGate or updateGateLocked runs) never calls
// anything that takes the lock: withStateLock, withStateLockCtx, or a
// function of this package that calls one of them, however deep. Such a
// call would wait for itself until stateLockWait ends. The walk is by
// name, over the package's non-test files: a false alarm is a name to
// change.
func TestStateLockIsNeverAskedForUnderIt(t *testing.T) {
	for _, v := range stateLockViolations(t, ".") {
		t.Error(v)
	}
}

// stateLockViolations lists, for the package in dir, each call to a
// function that takes the state lock from code that holds it.
func stateLockViolations(t *testing.T, dir string) []string {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	type fn struct {
		path string
		decl *ast.FuncDecl
	}
	var funcs []fn
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		for _, d := range parseHouseFile(t, path).file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				funcs = append(funcs, fn{path, fd})
			}
		}
	}
	called := func(call *ast.CallExpr) string {
		switch f := call.Fun.(type) {
		case *ast.Ident:
			return f.Name
		case *ast.SelectorExpr:
			return f.Sel.Name
		}
		return ""
	}
	// The functions that take the lock: the two that do, and every
	// function that calls one of them.
	takers := map[string]bool{"withStateLock": true, "withStateLockCtx": true}
	for grew := true; grew; {
		grew = false
		for _, f := range funcs {
			if takers[f.decl.Name.Name] {
				continue
			}
			ast.Inspect(f.decl.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok && takers[called(call)] {
					takers[f.decl.Name.Name], grew = true, true
				}
				return !takers[f.decl.Name.Name]
			})
		}
	}
	holdsToken := func(ft *ast.FuncType) bool {
		for _, p := range ft.Params.List {
			if isIdent(p.Type, "stateHeld") {
				return true
			}
		}
		return false
	}
	var out []string
	check := func(path, where string, body ast.Node) {
		ast.Inspect(body, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && takers[called(call)] {
				out = append(out, path+": "+where+" holds the state lock and calls "+called(call)+", which takes it")
			}
			return true
		})
	}
	for _, f := range funcs {
		if holdsToken(f.decl.Type) {
			check(f.path, f.decl.Name.Name, f.decl.Body)
		}
		ast.Inspect(f.decl.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncLit:
				if holdsToken(n.Type) {
					check(f.path, "a func in "+f.decl.Name.Name, n.Body)
				}
			case *ast.CallExpr:
				if name := called(n); name == "updateGate" || name == "updateGateLocked" {
					for _, arg := range n.Args {
						if lit, ok := arg.(*ast.FuncLit); ok {
							check(f.path, "a func "+f.decl.Name.Name+" gives "+name, lit.Body)
						}
					}
				}
			}
			return true
		})
	}
	return out
}

// TestStateLockOtherGoroutineIsToldBusy: another goroutine of the process
// that holds a directory's state lock is told busy, as another process
// would be; afterwards the lock is free.
func TestStateLockOtherGoroutineIsToldBusy(t *testing.T) {
	dir := tempDir(t)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	other := make(chan error, 1)
	require.NoError(t, withStateLock(dir, func(stateHeld) error {
		go func() { other <- withStateLockCtx(ended, dir, func(stateHeld) error { return nil }) }()
		err := <-other
		assert.ErrorIs(t, err, ErrBusy, "another goroutine gets the busy answer")
		assert.Contains(t, err.Error(), filepath.Join(dir, stateLockName))
		return nil
	}))
	require.NoError(t, withStateLockCtx(ended, dir, func(stateHeld) error { return nil }), "free again")
}

// TestStateHeldNamesTheLockedDirectory: the token withStateLock hands its
// func names the directory whose lock is held, and a *Locked helper given
// it writes there.
func TestStateHeldNamesTheLockedDirectory(t *testing.T) {
	dir := tempDir(t)
	require.NoError(t, withStateLock(dir, func(held stateHeld) error {
		assert.Equal(t, dir, held.dir)
		_, wrote, err := requestRestartLocked(held, RestartDrain, Self(), false)
		assert.True(t, wrote)
		return err
	}))
	mode, ok := RestartRequested(dir)
	assert.True(t, ok)
	assert.Equal(t, RestartDrain, mode)
}
