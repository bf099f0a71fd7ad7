//go:build linux

package runnerstate

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnerstate/runnerstate/internal/durable"
	"github.com/runnerstate/runnerstate/internal/gate"
	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Crash consistency: a writer killed with SIGKILL at a random instant, a few
// hundred times, never leaves a torn or unparsable state file, never drops a
// line it acknowledged, and never lets temporary files pile up.
//
// RUNNERSTATE_CRASH_KILLS sets how many kills (default 300, 60 with -short);
// the run also stops at RUNNERSTATE_CRASH_TIME (default 15s) and reports how
// many it managed:
//
//	go test -race -run '^TestCrashConsistency$' -v .
const (
	envCrashGen   = "RUNNERSTATE_TEST_GEN" // crash-writer: the first generation it writes
	crashLines    = 40                     // lines per SaveLines generation
	crashJournal  = "journal"
	crashState    = "state"
	crashMetaKey  = "gen"
	crashBudget   = 15 * time.Second
	crashDefKills = 300
)

// quietChild keeps a child's log to warnings: the parent copies a child's
// stderr into the test log, and the many children of the chaos and crash
// tests would drown it in routine clean-up notes.
func quietChild() {
	SetLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// crashFigures are the counts of one crash run.
type crashFigures struct {
	mu                        sync.Mutex
	kills, killedEarly, acked int
	leftovers, cleaned        int
	maxTemps                  int
}

func TestCrashConsistency(t *testing.T) {
	kills := crashDefKills
	if testing.Short() {
		kills = 60
	}
	if s := os.Getenv("RUNNERSTATE_CRASH_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "RUNNERSTATE_CRASH_KILLS")
		kills = n
	}
	budget := crashBudget
	if s := os.Getenv("RUNNERSTATE_CRASH_TIME"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "RUNNERSTATE_CRASH_TIME")
		budget = d
	}
	deadline := time.Now().Add(budget)
	// Two writers on two dirs: the machines CI runs on have two cores.
	const workers = 2
	var fig crashFigures
	t.Run("writers", func(t *testing.T) {
		for w := range workers {
			t.Run(strconv.Itoa(w), func(t *testing.T) {
				t.Parallel()
				seed := uint64(time.Now().UnixNano())
				t.Logf("seed %d", seed)
				crashWorker(t, t.TempDir(), kills/workers, deadline, rand.New(rand.NewPCG(seed, uint64(w))), &fig)
			})
		}
	})
	t.Logf("crash figures: %d SIGKILLs (%d before the writer was ready), %d writes acknowledged, %d temporary files left by killed writers, all %d removed by the next writer; at most %d temporary files at once",
		fig.kills, fig.killedEarly, fig.acked, fig.leftovers, fig.cleaned, fig.maxTemps)
	assert.Equal(t, fig.leftovers, fig.cleaned, "every leftover temporary file is removed by the next writer")
	if fig.kills < kills {
		t.Logf("stopped at the %v budget after %d of %d kills", budget, fig.kills, kills)
	}
}

// crashWorker kills writers on dir until it has killed n or the deadline
// passed, checking the dir after every kill.
func crashWorker(t *testing.T, dir string, n int, deadline time.Time, rng *rand.Rand, fig *crashFigures) {
	next := 0     // the generation the next writer starts at
	lastAck := -1 // the last generation acknowledged, by any writer
	lockPID := 0  // the pid runner.lock named after the previous kill
	var pending []string
	for k := 0; k < n && time.Now().Before(deadline); k++ {
		w := startCrashWriter(t, dir, next)
		early := rng.IntN(5) == 0
		if early {
			// Anywhere in Takeover: the gate, the lock file, the cleanup.
			time.Sleep(time.Duration(rng.IntN(40_000)) * time.Microsecond)
		} else {
			w.expectReady(t)
			if rng.IntN(2) == 0 {
				// Past a whole round first, on a machine where a round
				// (eight fsyncs) takes longer than the random delay below.
				w.expectAck(t)
			}
			time.Sleep(time.Duration(rng.IntN(25_000)) * time.Microsecond)
		}
		w.c.Kill()
		acks := w.readToEnd(t)
		w.c.Wait()
		settled := next - 1 // the generation every file held at least when the writer started
		if len(acks) > 0 {
			settled = acks[len(acks)-1]
			if len(pending) > 0 {
				// The killed writers' leftovers must be gone once a later
				// writer wrote every file once.
				for _, p := range pending {
					if _, err := os.Lstat(p); err == nil {
						t.Errorf("a killed writer's temporary file %s survived a full round of writes", p)
					}
				}
				fig.mu.Lock()
				fig.cleaned += len(pending)
				fig.mu.Unlock()
				pending = nil
			}
			lastAck = acks[len(acks)-1]
		}
		maxLine, named := checkCrashedDir(t, dir, w.c.PID(), lockPID, settled, lastAck)
		next = maxLine + 1
		if named != 0 {
			lockPID = named
		}
		temps := tempFiles(t, dir)
		fig.mu.Lock()
		fig.kills++
		if early && !w.ready {
			fig.killedEarly++
		}
		fig.acked += len(acks)
		fig.leftovers += len(temps)
		fig.maxTemps = max(fig.maxTemps, len(temps))
		fig.mu.Unlock()
		pending = append(pending, temps...)
		if t.Failed() {
			return
		}
	}
	// A last writer that runs to its first acknowledgement, and a clean
	// runner after it: nothing the killed writers wrote is left behind.
	w := startCrashWriter(t, dir, next)
	w.expectReady(t)
	w.c.Expect("ack " + strconv.Itoa(next))
	w.c.Kill()
	w.readToEnd(t)
	w.c.Wait()
	release, err := Acquire(dir)
	require.NoError(t, err)
	require.NoError(t, SaveLines(dir, crashState, []string{"done"}))
	require.NoError(t, AppendLine(dir, crashJournal, "done"))
	require.NoError(t, RequestRestart(dir, RestartDrain))
	require.NoError(t, Publish(dir, Record{}))
	release()
	fig.mu.Lock()
	fig.cleaned += len(pending)
	fig.mu.Unlock()
	for _, p := range pending {
		assert.NoFileExists(t, p, "a killed writer's temporary file")
	}
	assertNoTemps(t, dir)
}

type crashWriter struct {
	c     *child
	ready bool
	acks  []int // generations acknowledged so far
}

func startCrashWriter(t *testing.T, dir string, gen int) *crashWriter {
	cmd := testharness.Command(dir)
	cmd.Env = append(os.Environ(), envCrashGen+"="+strconv.Itoa(gen))
	return &crashWriter{c: startChildCmd(t, cmd, "crash-writer")}
}

func (w *crashWriter) expectReady(t *testing.T) {
	t.Helper()
	w.c.Expect("ready")
	w.ready = true
}

// expectAck waits for the writer's next acknowledgement.
func (w *crashWriter) expectAck(t *testing.T) {
	t.Helper()
	n := len(w.acks)
	w.read(t, func() bool { return len(w.acks) > n })
}

// readToEnd reads what the killed writer said to the end and returns the
// generations it acknowledged.
func (w *crashWriter) readToEnd(t *testing.T) []int {
	t.Helper()
	w.read(t, func() bool { return false })
	return w.acks
}

// read takes the writer's lines until done says so or its output ends.
func (w *crashWriter) read(t *testing.T, done func() bool) {
	t.Helper()
	timeout := time.After(childWait)
	for !done() {
		select {
		case line, ok := <-w.c.Lines:
			if !ok {
				return
			}
			switch {
			case line == "ready":
				w.ready = true
			case strings.HasPrefix(line, "ack "):
				n, err := strconv.Atoi(strings.TrimPrefix(line, "ack "))
				require.NoError(t, err)
				w.acks = append(w.acks, n)
			default:
				t.Errorf("crash writer %d: %s", w.c.PID(), line)
				return
			}
		case <-timeout:
			t.Fatalf("crash writer %d: no line for %v", w.c.PID(), childWait)
		}
	}
}

// checkCrashedDir checks every file of dir right after a writer was killed:
// each parses, each holds one generation whole, the journal holds every
// acknowledged line in order. pid is the killed writer's, lockPID the pid
// runner.lock named before it started. settled is the generation every file
// was known to hold at least: the killed writer's last acknowledged one, or
// the one before its first; lastAck is the last generation any writer
// acknowledged. It returns the last line number in the journal and the pid
// runner.lock names (0 for none).
func checkCrashedDir(t *testing.T, dir string, pid, lockPID, settled, lastAck int) (int, int) {
	t.Helper()
	// The generations a file may hold: the settled one, or the one in flight
	// when the writer died. Files are written in order, a generation at a
	// time, so nothing else: not older (undone), not newer (made up), not mixed
	// (torn).
	okGen := func(g int) bool { return g == settled || g == settled+1 }

	if data, err := os.ReadFile(filepath.Join(dir, RecordName)); err == nil {
		rec, err := parseRecord(data)
		if assert.NoError(t, err, "runner.json after a SIGKILL: %q", data) {
			var meta map[string]int
			if len(rec.Meta) > 0 {
				require.NoError(t, json.Unmarshal(rec.Meta, &meta))
				assert.True(t, okGen(meta[crashMetaKey]), "runner.json holds generation %d, settled %d", meta[crashMetaKey], settled)
			}
		}
	} else {
		assert.ErrorIs(t, err, os.ErrNotExist)
	}
	if data, err := os.ReadFile(filepath.Join(dir, RestartName)); err == nil {
		_, err := parseRestart(data)
		assert.NoError(t, err, "restart.json after a SIGKILL: %q", data)
	}
	if data, err := os.ReadFile(filepath.Join(dir, gateName)); err == nil {
		_, err := gate.Parse(data)
		assert.NoError(t, err, "gate.json after a SIGKILL: %q", data)
	}
	named := 0
	if data, err := os.ReadFile(filepath.Join(dir, LockName)); err == nil && len(data) > 0 {
		id, ok := parseLockContent(data)
		assert.True(t, ok, "runner.lock after a SIGKILL: %q", data)
		assert.True(t, id.PID == pid || id.PID == lockPID, "runner.lock names pid %d, neither the killed writer %d nor the one it named before, %d", id.PID, pid, lockPID)
		named = id.PID
	}
	if lines, err := LoadLines(dir, crashState); assert.NoError(t, err) && lines != nil {
		if assert.Len(t, lines, crashLines, "the state file is whole") {
			var g int
			_, err := fmt.Sscanf(lines[0], "gen %d", &g)
			require.NoError(t, err, "state line %q", lines[0])
			assert.True(t, okGen(g), "the state file holds generation %d, settled %d", g, settled)
			for i, l := range lines {
				assert.True(t, strings.HasPrefix(l, fmt.Sprintf("gen %d %d ", g, i)), "state line %d is %q in generation %d: torn", i, l, g)
			}
		}
	}
	journal, err := LoadLines(dir, crashJournal)
	require.NoError(t, err)
	for i, l := range journal {
		if l != "line "+strconv.Itoa(i) {
			t.Errorf("journal line %d is %q: dropped or torn", i, l)
			break
		}
	}
	assert.GreaterOrEqual(t, len(journal)-1, lastAck, "an acknowledged line was dropped")
	assert.True(t, okGen(len(journal)-1), "the journal ends at line %d, settled %d", len(journal)-1, settled)

	// The lock went with the writer.
	st, err := Status(dir)
	require.NoError(t, err)
	assert.False(t, st.Held, "a killed writer holds no lock")
	return len(journal) - 1, named
}

// tempFiles lists the temporary files in dir, with their paths.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var temps []string
	for _, e := range entries {
		if durable.IsTemp(e.Name()) {
			temps = append(temps, filepath.Join(dir, e.Name()))
		}
	}
	return temps
}

// Case: a writer killed with SIGKILL leaves temporary files for several
// names; the next writer of each name removes them, while a live writer's
// temporary file is never touched.
func TestCrashLeftoversOfDeadWriters(t *testing.T) {
	dir := t.TempDir()
	// A live process of this test binary, writing nothing: the writer the
	// temporary files below are named after.
	w := startChild(t, "acquire", t.TempDir())
	w.Expect("acquired")
	tag := liveWriterTag(t, w.PID())
	var planted []string
	for _, name := range []string{RecordName, RestartName, gateName, crashState, crashJournal} {
		p := filepath.Join(dir, durable.TempPrefix(name)+tag+"-dead00")
		require.NoError(t, os.WriteFile(p, []byte("partial"), 0o644))
		planted = append(planted, p)
	}
	// writeEach takes dir over and writes each name once.
	writeEach := func() {
		release, err := Takeover(background(t), dir, TakeoverOptions{})
		require.NoError(t, err)
		require.NoError(t, Publish(dir, Record{}))
		require.NoError(t, RequestRestart(dir, RestartNow))
		require.NoError(t, SaveLines(dir, crashState, nil))
		require.NoError(t, AppendLine(dir, crashJournal, "x"))
		release()
	}
	// While the writer lives, nobody removes its files (they may be half
	// written right now).
	writeEach()
	for _, p := range planted {
		assert.FileExists(t, p, "a live writer's temporary file was removed")
	}
	// Killed, its leftovers go with the next write of each name.
	w.Kill()
	w.Wait()
	writeEach()
	for _, p := range planted {
		assert.NoFileExists(t, p, "a dead writer's temporary file survived the next write")
	}
	assertNoTemps(t, dir)
}

// liveWriterTag is the writer tag (see writerTag) another process of this
// test binary puts in its temporary file names.
func liveWriterTag(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(t, err)
	parts := strings.Split(durable.WriterTag(), "-")
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	return strconv.Itoa(pid) + "-" + f[22-3] + "-" + parts[2]
}

func init() { registerRole("crash-writer", roleCrashWriter) }

// crash-writer: take dir over, say "ready", then for gen = $GEN, $GEN+1,
// ...: on every fifth gen, release and take dir over again; Publish a
// record whose meta is {"gen": gen}; leave a restart
// request (cleared and re-made as drain on even gens, upgraded to now on
// odd ones); replace the state file with crashLines lines "gen <gen>
// <i>"; append "line <gen>" to the journal; say "ack <gen>". It runs
// until it is killed.
func roleCrashWriter(dir string) int {
	gen, err := strconv.Atoi(os.Getenv(envCrashGen))
	if err != nil {
		say("error %v", err)
		return 1
	}
	quietChild()
	ctx, cancel := context.WithTimeout(context.Background(), childWait)
	defer cancel()
	release, err := Takeover(ctx, dir, TakeoverOptions{})
	if err != nil {
		say("error %v", err)
		return 1
	}
	say("ready")
	lines := make([]string, crashLines)
	for ; ; gen++ {
		if gen%5 == 4 {
			// Let go and take the directory again now and then, so that
			// kills land in release and in admission too.
			release()
			if release, err = Takeover(ctx, dir, TakeoverOptions{}); err != nil {
				say("error retake %v", err)
				return 1
			}
		}
		meta, _ := json.Marshal(map[string]int{crashMetaKey: gen})
		if err := Publish(dir, Record{Meta: meta}); err != nil {
			say("error publish %v", err)
			return 1
		}
		if gen%2 == 0 {
			if err := ClearRestart(dir); err != nil {
				say("error clear %v", err)
				return 1
			}
			err = RequestRestart(dir, RestartDrain)
		} else {
			err = RequestRestart(dir, RestartNow)
		}
		if err != nil {
			say("error request %v", err)
			return 1
		}
		for i := range lines {
			lines[i] = fmt.Sprintf("gen %d %d %s", gen, i, strings.Repeat("x", 64))
		}
		if err := SaveLines(dir, crashState, lines); err != nil {
			say("error save %v", err)
			return 1
		}
		if err := AppendLine(dir, crashJournal, fmt.Sprintf("line %d", gen)); err != nil {
			say("error append %v", err)
			return 1
		}
		say("ack %d", gen)
	}
}
