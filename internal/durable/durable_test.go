package durable

import (
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate/internal/liveness"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// FuzzTempWriterTag feeds the names of temporary files, which anyone who can
// write the directory can choose. A name is only ever evidence against its
// writer when it is of this boot and PID namespace, and no pid <= 0 is ever
// probed.
func FuzzTempWriterTag(f *testing.F) {
	self := strings.Split(WriterTag(), "-")
	f.Add(WriterTag() + "-abcdef")
	f.Add("1-1-" + self[2] + "-x")
	f.Add("0-5-" + self[2] + "-x")
	f.Add("-1-5-" + self[2] + "-x")
	f.Add("99999999999999-5-" + self[2] + "-x")
	f.Add("1-1-ffffffff-x")
	f.Fuzz(func(t *testing.T, tag string) {
		var probed []int
		defer liveness.SetProbeHook(func(pid int) { probed = append(probed, pid) })()
		gone := WriterGone(tag)
		for _, pid := range probed {
			if pid <= 0 {
				t.Fatalf("tag %q probed pid %d", tag, pid)
			}
		}
		parts := strings.Split(tag, "-")
		if gone && (len(parts) != 4 || parts[2] != self[2]) {
			t.Fatalf("tag %q of another boot or namespace was judged gone", tag)
		}
		if gone && parts[0] == self[0] && parts[1] == self[1] {
			t.Fatalf("this very process was judged gone from %q", tag)
		}
	})
}
