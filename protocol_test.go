package runnerstate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProtocolOfAFile: a file without the number, and a lock file's bare
// pid, are protocol 1; a number that is not a positive integer counts as
// newer than any.
func TestProtocolOfAFile(t *testing.T) {
	for _, c := range []struct {
		data string
		want int
	}{
		{`{"pid":12,"ready":true}`, 1}, // v0.3's runner.json
		{`{"seq":3,"admitted":2,"waiting":[]}`, 1},
		{`12345`, 1}, // an older runner's lock file
		{``, 1},
		{`{"protocol":1,"pid":12}`, 1},
		{`{"pid":12,"protocol":2}`, 2},
		{`{"protocol":"2"}`, 0},
		{`{"protocol":-1}`, 0},
		{`{"protocol":1.5}`, 0},
		{`{"protocol":null}`, 1},
		{`{"meta":{"protocol":7}}`, 1}, // the caller's Meta is not the file's
		{"{\"protocol\":3}\n", 3},
	} {
		assert.Equal(t, c.want, protocolOf([]byte(c.data)), c.data)
		assert.Equal(t, c.want == 0 || c.want > protocolVersion, newerProtocol(c.want), c.data)
	}
	line, err := protocolLine(struct{}{})
	require.NoError(t, err)
	assert.Equal(t, "{\"protocol\":1}\n", string(line))
	_, err = protocolLine([]int{1})
	assert.Error(t, err, "only an object carries the number")
}
