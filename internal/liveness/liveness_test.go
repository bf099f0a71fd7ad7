package liveness

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate/internal/testharness"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	testharness.RunRole(roles)
	goleak.VerifyTestMain(m)
}

// roles are the programs of the re-executed test binary (see
// internal/testharness); leader-exit, which must run on the main thread, is
// played in an init function instead (liveness_linux_test.go).
var roles = testharness.Roles{
	"identity": roleIdentity,
	"block":    roleBlock,
}

// roleIdentity prints Current() as one JSON line, then behaves like block.
func roleIdentity(string) int {
	b, _ := json.Marshal(Current())
	fmt.Println(string(b))
	return roleBlock("")
}

// roleBlock waits until stdin reaches EOF (the parent closed it, or died),
// then exits 0.
func roleBlock(string) int {
	for range testharness.Commands() {
	}
	return 0
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[Verdict]string{
		Unverifiable:   "unverifiable",
		Self:           "self",
		Alive:          "alive",
		Dead:           "dead",
		Stale:          "stale",
		Foreign:        "foreign",
		OtherNamespace: "other-namespace",
		Verdict(42):    "verdict(42)",
		Verdict(-1):    "verdict(-1)",
	} {
		assert.Equal(t, want, v.String())
	}
}

// statLine builds a /proc/<pid>/stat line with all 52 fields of a current
// kernel, field 22 being start.
func statLine(pid int, comm string, state string, ppid string, start string) string {
	f := []string{strconv.Itoa(pid), "(" + comm + ")", state, ppid}
	for n := 5; n <= 52; n++ {
		switch n {
		case 22:
			f = append(f, start)
		default:
			f = append(f, strconv.Itoa(n*10))
		}
	}
	return strings.Join(f, " ") + "\n"
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr bool
	}{
		{name: "plain", in: statLine(42, "bash", "S", "1", "123456"), want: Stat{'S', 1, 123456, 90}},
		{name: "comm with spaces", in: statLine(42, "my prog x", "R", "7", "9"), want: Stat{'R', 7, 9, 90}},
		{name: "comm with close paren", in: statLine(42, "a) b)", "S", "7", "9"), want: Stat{'S', 7, 9, 90}},
		{name: "comm faking fields", in: statLine(42, "x) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21", "D", "7", "9"), want: Stat{'D', 7, 9, 90}},
		{name: "comm with open parens", in: statLine(42, "((x(", "S", "7", "9"), want: Stat{'S', 7, 9, 90}},
		{name: "comm with newline", in: statLine(42, "a\nb", "Z", "7", "9"), want: Stat{'Z', 7, 9, 90}},
		{name: "empty comm", in: statLine(42, "", "I", "2", "0"), want: Stat{'I', 2, 0, 90}},
		{name: "pid 1 ppid 0", in: statLine(1, "init", "S", "0", "5"), want: Stat{'S', 0, 5, 90}},
		{name: "exactly 22 fields", in: "9 (x) S 1 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 777", want: Stat{'S', 1, 777, 9}},
		{name: "max uint64 start", in: statLine(42, "x", "S", "1", "18446744073709551615"), want: Stat{'S', 1, 1<<64 - 1, 90}},
		{name: "flags not a number", in: strings.Replace(statLine(42, "x", "S", "1", "1"), " 90 ", " 9x ", 1), wantErr: true},
		{name: "flags overflow uint32", in: strings.Replace(statLine(42, "x", "S", "1", "1"), " 90 ", " 4294967296 ", 1), wantErr: true},
		{name: "start overflows uint64", in: statLine(42, "x", "S", "1", "18446744073709551616"), wantErr: true},
		{name: "huge ppid", in: statLine(42, "x", "S", "99999999999999999999", "1"), wantErr: true},
		{name: "negative ppid", in: statLine(42, "x", "S", "-1", "1"), wantErr: true},
		{name: "negative start", in: statLine(42, "x", "S", "1", "-5"), wantErr: true},
		{name: "start not a number", in: statLine(42, "x", "S", "1", "12a"), wantErr: true},
		{name: "two-letter state", in: statLine(42, "x", "RS", "1", "1"), wantErr: true},
		{name: "digit state", in: statLine(42, "x", "1", "1", "1"), wantErr: true},
		{name: "truncated before field 22", in: "9 (x) S 1 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21", wantErr: true},
		{name: "truncated in comm", in: "9 (bash", wantErr: true},
		{name: "nothing after comm", in: "9 (bash)", wantErr: true},
		{name: "no comm", in: "9 S 1 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22", wantErr: true},
		{name: "close before open", in: ")(", wantErr: true},
		{name: "no pid", in: "(x) S 1 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 777", wantErr: true},
		{name: "pid not a number", in: "x1 (x) S 1 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 777", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "garbage", in: "\x00\xff\xfe)(", wantErr: true},
		{name: "words", in: "hello world", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.in))
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// FuzzParseStat checks that ParseStat never panics and that what it accepts
// is consistent. Seeds: testdata/fuzz/FuzzParseStat and the lines below.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine(42, "a) b (c", "S", "1", "77")))
	f.Add([]byte("1 () R 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStat(data)
		if err != nil {
			return
		}
		if !isLetter(st.State) || st.PPID < 0 {
			t.Fatalf("accepted %q as %+v", data, st)
		}
		if !strings.Contains(string(data), strconv.FormatUint(st.StartTicks, 10)) {
			t.Fatalf("start ticks %d not in %q", st.StartTicks, data)
		}
	})
}

// TestPrecheck covers rules 1 to 4 of Check, which decide from the records
// alone, against a fixed "current" identity.
func TestPrecheck(t *testing.T) {
	cur := Identity{PID: 100, StartTicks: 5, BootID: "boot-a", PIDNS: "4:4026531836", Machine: "m-a", Hostname: "h"}
	type tc struct {
		name   string
		edit   func(*Identity)
		want   Verdict
		reason string // substring of the reason; "" means rules 1-4 pass the record on to the probe
	}
	tests := []tc{
		{"pid 0", func(id *Identity) { id.PID = 0 }, Unverifiable, "no pid"},
		{"negative pid", func(id *Identity) { id.PID = -7 }, Unverifiable, "no pid"},
		{"rebooted", func(id *Identity) { id.BootID = "boot-b" }, Stale, "rebooted"},
		{"other boot, other machine", func(id *Identity) { id.BootID, id.Machine = "boot-b", "m-b" }, Foreign, "boot id"},
		{"other boot, machine unknown", func(id *Identity) { id.BootID, id.Machine = "boot-b", "" }, Foreign, "unknown in record"},
		{"no boot id, other machine", func(id *Identity) { id.BootID, id.Machine = "", "m-b" }, Foreign, "machine"},
		{"same boot, other machine (container)", func(id *Identity) { id.Machine = "m-b" }, 0, ""},
		{"hostname differs only", func(id *Identity) { id.Hostname = "elsewhere" }, 0, ""},
		{"other pid namespace", func(id *Identity) { id.PIDNS = "4:4026532177" }, OtherNamespace, "pid namespace"},
		{"no pid namespace in record", func(id *Identity) { id.PIDNS = "" }, Unverifiable, "no pid namespace in record"},
		{"legacy record", func(id *Identity) { id.StartTicks = 0 }, Unverifiable, "legacy record without start identity"},
		{"legacy record from other namespace", func(id *Identity) { id.StartTicks, id.PIDNS = 0, "1:2" }, OtherNamespace, "pid namespace"},
		{"other machine beats legacy", func(id *Identity) { id.StartTicks, id.BootID, id.Machine = 0, "boot-b", "m-b" }, Foreign, "boot id"},
	}
	if startIsBootRelative {
		tests = append(tests, tc{"no boot id, same machine", func(id *Identity) { id.BootID = "" }, Unverifiable, "no boot id in record"})
	}
	if strconv.IntSize == 64 {
		tests = append(tests, tc{"pid beyond 32 bits", func(id *Identity) { id.PID = math.MaxInt }, Unverifiable, "out of range"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := cur
			tt.edit(&id)
			v, why, done := precheck(id, cur)
			if tt.reason == "" {
				assert.False(t, done, "settled as %s (%s)", v, why)
				return
			}
			require.True(t, done)
			assert.Equal(t, tt.want, v, why)
			assert.Contains(t, why, tt.reason)
		})
	}
}

// TestNothingProbed: records that rules 1 to 4 settle never reach the
// kernel: no probe of any pid and no signal, through Check, Pin or Lookup.
func TestNothingProbed(t *testing.T) {
	probed := recordProbes(t)
	cur := Current()
	bad := []int{0, -1, -os.Getpid(), math.MinInt}
	if strconv.IntSize == 64 {
		bad = append(bad, math.MaxInt) // truncated to 32 bits it would be -1: every process
	}
	var ids []Identity
	for _, pid := range bad {
		ids = append(ids, Identity{PID: pid, StartTicks: cur.StartTicks, BootID: cur.BootID, PIDNS: cur.PIDNS, Machine: cur.Machine})
	}
	ids = append(ids, Identity{PID: os.Getpid(), BootID: cur.BootID, PIDNS: cur.PIDNS}) // legacy
	for _, id := range ids {
		v, why := Check(id)
		assert.Equal(t, Unverifiable, v, "pid %d: %s", id.PID, why)
		p, v, _ := Pin(id)
		assert.Nil(t, p)
		assert.Equal(t, Unverifiable, v)
	}
	for _, pid := range bad {
		_, err := Lookup(pid)
		assert.Error(t, err)
		assert.NotErrorIs(t, err, ErrNoProcess, "pid %d", pid)
	}
	assert.Empty(t, *probed)
}

// TestSelfIsNotAProbe: computing this process's own identity never calls
// the probe hook, whichever test first calls Current.
func TestSelfIsNotAProbe(t *testing.T) {
	probed := recordProbes(t)
	id := currentIdentity()
	assert.Equal(t, os.Getpid(), id.PID)
	assert.Empty(t, *probed)
}

// recordProbes collects every pid probed and fails the test on any signal,
// until the test ends.
func recordProbes(t *testing.T) *[]int {
	var probed []int
	t.Cleanup(SetProbeHook(func(pid int) { probed = append(probed, pid) }))
	t.Cleanup(SetSignalHook(func(pid int, sig Signal) { t.Errorf("signal %v sent to pid %d", sig, pid) }))
	return &probed
}

func TestZeroProcess(t *testing.T) {
	for _, p := range []*Process{nil, {}} {
		assert.Equal(t, 0, p.PID())
		v, _ := p.Verify()
		assert.Equal(t, Unverifiable, v)
		assert.ErrorIs(t, p.Signal(SIGTERM), ErrNotAlive)
		assert.Error(t, p.Wait(context.Background()))
		assert.False(t, p.Exited())
		assert.NoError(t, p.Close())
	}
}

func TestCurrentInstance(t *testing.T) {
	id := Current()
	assert.Len(t, id.Instance, 32)
	assert.Equal(t, strings.Trim(id.Instance, "0123456789abcdef"), "", "hex")
	assert.Equal(t, os.Getpid(), id.PID)
	assert.Equal(t, id, Current(), "computed once")
}

// A record without a pid is never evidence of anything.
func ExampleCheck() {
	v, why := Check(Identity{PID: 0})
	fmt.Println(v, why)
	// Output: unverifiable no pid
}

// TestSameProcess: two records name one incarnation only when pid, start
// ticks, boot and pid namespace agree, and the instances do when both have
// one; a pid <= 0 names nothing.
func TestSameProcess(t *testing.T) {
	a := Identity{Instance: "aa", PID: 7, StartTicks: 100, BootID: "b", PIDNS: "4:1"}
	for _, tc := range []struct {
		name string
		b    Identity
		want bool
	}{
		{"itself", a, true},
		{"one side without instance", Identity{PID: 7, StartTicks: 100, BootID: "b", PIDNS: "4:1"}, true},
		{"another instance", Identity{Instance: "bb", PID: 7, StartTicks: 100, BootID: "b", PIDNS: "4:1"}, false},
		{"another pid", Identity{Instance: "aa", PID: 8, StartTicks: 100, BootID: "b", PIDNS: "4:1"}, false},
		{"recycled pid", Identity{Instance: "aa", PID: 7, StartTicks: 101, BootID: "b", PIDNS: "4:1"}, false},
		{"another boot", Identity{Instance: "aa", PID: 7, StartTicks: 100, BootID: "c", PIDNS: "4:1"}, false},
		{"another pid namespace", Identity{Instance: "aa", PID: 7, StartTicks: 100, BootID: "b", PIDNS: "4:2"}, false},
	} {
		assert.Equal(t, tc.want, a.SameProcess(tc.b), tc.name)
		assert.Equal(t, tc.want, tc.b.SameProcess(a), tc.name+", the other way")
	}
	assert.False(t, Identity{}.SameProcess(Identity{}), "pid 0 names no process")
	assert.True(t, ValidPID(1))
	assert.True(t, ValidPID(math.MaxInt32))
	for _, pid := range []int{0, -1, math.MaxInt32 + 1, 1 << 32} {
		assert.False(t, ValidPID(pid), pid)
	}
}
