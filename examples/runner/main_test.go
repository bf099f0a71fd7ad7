//go:build unix

package main

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Case: every quoted name reads back, as one word, as itself in bash.
func TestShellQuoteReadsBackInBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	for _, s := range []string{
		"/tmp/plain-dir_1.2", "", "with space", "it's", `a\b`, "$HOME", "`id`", "semi;colon", "star*", "a!b",
		"/tmp/x\ny", "tab\there", "esc\x1b[31m", "it's\n$HOME!", "bad\xffutf8", "zero\u200bwidth", "ünïcode", "--dir",
	} {
		q := shellQuote(s)
		out, err := exec.Command(bash, "-c", `printf '%s|' `+q).Output()
		require.NoError(t, err, "%q quoted as %s", s, q)
		assert.Equal(t, s+"|", string(out), "%q quoted as %s", s, q)
		for _, c := range q {
			assert.False(t, c < 0x20 || c == 0x7f, "%q quoted as %q prints a control character", s, q)
		}
	}
	assert.Equal(t, "/tmp/plain-dir_1.2", shellQuote("/tmp/plain-dir_1.2"), "a plain name stays as it is")
	assert.Equal(t, `'it'\''s'`, shellQuote("it's"))
}

// Case: flags that cannot work are refused before the directory is taken
// (-parallel -1 made a channel of negative size and panicked after
// admission; a stray argument was ignored).
func TestBadFlagsAreRefusedFirst(t *testing.T) {
	for _, c := range []struct {
		parallel, jobs int
		mode           string
		args           []string
		want           string
	}{
		{-1, 0, "now", nil, "-parallel -1"},
		{0, 0, "now", nil, "-parallel 0"},
		{2, -1, "now", nil, "-jobs -1"},
		{2, 0, "bogus", nil, `-mode "bogus"`},
		{2, 0, "now", []string{"extra"}, `unexpected argument "extra"`},
	} {
		assert.Contains(t, badFlags(c.parallel, c.jobs, c.mode, c.args), c.want)
	}
	assert.Empty(t, badFlags(2, 0, "drain", nil))
}
