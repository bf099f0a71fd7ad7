package memo

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseDecodesNewBytesOnly(t *testing.T) {
	decoded := 0
	m := New(func(data []byte) ([]byte, error) {
		decoded++
		if len(data) == 0 {
			return nil, errors.New("empty")
		}
		return data, nil
	}, func(b []byte) []byte { return append([]byte(nil), b...) })

	got, err := m.Parse([]byte("one"))
	require.NoError(t, err)
	assert.Equal(t, "one", string(got))
	got[0] = 'X' // the caller's copy
	again, err := m.Parse([]byte("one"))
	require.NoError(t, err)
	assert.Equal(t, "one", string(again), "a copy was handed out, not the memo's own")
	assert.Equal(t, 1, decoded, "the same bytes are decoded once")

	_, err = m.Parse([]byte("two"))
	require.NoError(t, err)
	assert.Equal(t, 2, decoded, "other bytes are decoded afresh")
	_, err = m.Parse([]byte{})
	assert.EqualError(t, err, "empty")
	_, err = m.Parse([]byte{})
	assert.EqualError(t, err, "empty", "an error is remembered with its bytes")
	assert.Equal(t, 3, decoded)
}
