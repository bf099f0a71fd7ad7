package accept

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

type record struct {
	PID  int             `json:"pid"`
	Meta json.RawMessage `json:"meta,omitempty"`
}

// TestOnce: fn is asked once per distinct value and its answer kept; a
// changed value is asked again; nil accepts all; a value that cannot be
// encoded is asked each time.
func TestOnce(t *testing.T) {
	asked := 0
	ok := Once(func(r record) bool { asked++; return r.PID == 1 })
	assert.True(t, ok(record{PID: 1}))
	assert.True(t, ok(record{PID: 1}))
	assert.False(t, ok(record{PID: 2}))
	assert.False(t, ok(record{PID: 2}))
	assert.Equal(t, 2, asked)

	bad := record{PID: 1, Meta: json.RawMessage("{")}
	ok(bad)
	ok(bad)
	assert.Equal(t, 4, asked, "asked each time")

	assert.True(t, Once[record](nil)(record{}))
}
