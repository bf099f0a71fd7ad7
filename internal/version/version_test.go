package version

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCompare: semantic order, with or without the leading "v"; a version
// that is empty or not semver compares with nothing.
func TestCompare(t *testing.T) {
	cases := []struct {
		a, b string
		cmp  int
		ok   bool
	}{
		{"v1", "v2", -1, true},
		{"1.2.0", "v1.2.0", 0, true},
		{"v1.10.0", "v1.9.0", 1, true},
		{"v1.1.0-rc.1", "v1.1.0", -1, true},
		{"", "v1.0.0", 0, false},
		{"dev", "v1.0.0", 0, false},
	}
	for _, c := range cases {
		cmp, ok := Compare(c.a, c.b)
		assert.Equal(t, c.ok, ok, "%q against %q", c.a, c.b)
		assert.Equal(t, c.cmp, cmp, "%q against %q", c.a, c.b)
	}
}
