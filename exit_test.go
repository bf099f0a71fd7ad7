package runnerstate

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLogLines: at most 20 lines and 4 KiB, the last ones, without the
// empty end; nil for nothing.
func TestLogLines(t *testing.T) {
	assert.Nil(t, logLines(""))
	assert.Nil(t, logLines("\n\n"))
	assert.Equal(t, []string{"a", "b"}, logLines("a\nb\n"))
	var b strings.Builder
	for i := range 30 {
		b.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	lines := logLines(b.String())
	assert.Len(t, lines, 20)
	assert.Equal(t, "line 29", lines[19])
	long := strings.Repeat(strings.Repeat("x", 1000)+"\n", 10)
	lines = logLines(long)
	assert.LessOrEqual(t, len(strings.Join(lines, "\n")), maxLogTail)
	assert.Len(t, lines[0], 1000, "cut at a line")
}

// TestExitOfAttempt: only an attempt that failed has an Exit; How is
// "unknown" when nobody reaped it.
func TestExitOfAttempt(t *testing.T) {
	assert.Nil(t, exitOfAttempt(startAttempt{Seq: 1, Ready: true}))
	e := exitOfAttempt(startAttempt{Seq: 1, Failed: true, LogTail: "boom\n", How: "exit 3"})
	assert.Nil(t, e, "no child, no exit")
	a := startAttempt{Seq: 1, Failed: true, LogTail: "boom\n", How: "exit 3"}
	a.Child.PID = 42
	e = exitOfAttempt(a)
	assert.Equal(t, "exit 3", e.How)
	assert.Equal(t, []string{"boom"}, e.Log)
	a.How = ""
	assert.Equal(t, "unknown", exitOfAttempt(a).How, "never a guess")
}
