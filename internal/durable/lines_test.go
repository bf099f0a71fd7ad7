package durable

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLines: what JoinLines writes, SplitLines reads back; a line with a
// "\n" is named by its index; AppendLine completes a last line first.
func TestLines(t *testing.T) {
	data, bad := JoinLines([]string{"a", "", "# c"})
	assert.Equal(t, -1, bad)
	assert.Equal(t, "a\n\n# c\n", string(data))
	assert.Equal(t, []string{"a", "", "# c"}, SplitLines(data))

	data, bad = JoinLines([]string{"a", "b\nc"})
	assert.Nil(t, data)
	assert.Equal(t, 1, bad)

	assert.Equal(t, []string{}, SplitLines(nil), "empty, not nil")
	assert.Equal(t, []string{"a", "b"}, SplitLines([]byte("a\nb")), "a last line without its newline")

	old := []byte("a\nb")
	assert.Equal(t, "a\nb\nc\n", string(AppendLine(old, "c")))
	assert.Equal(t, "a\nb", string(old), "unchanged")
	assert.Equal(t, "c\n", string(AppendLine(nil, "c")))
	assert.Equal(t, "a\nc\n", string(AppendLine([]byte("a\n"), "c")))
}
