package daemon

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The docs a daemon's author needs say what the code does: where the
// server may keep its files, how to pass options to a server Dial starts,
// how often Dial starts one that crashes, how long Listen's context should
// be with a drain, what new clients wait during one, and what a server owes
// the connections it accepted.
func TestDocsSayWhatADaemonAuthorNeeds(t *testing.T) {
	data, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(data), "\n### A daemon of your own\n")
	require.True(t, ok, "docs/operations.md has a section \"A daemon of your own\"")
	section, _, _ = strings.Cut(section, "\n### ")
	section = strings.Join(strings.Fields(section), " ")
	for _, want := range []string{
		"**Answer what you accepted.**", "`daemon.ServeHTTP`",
		"**Its own files.**", "`runnerstate.SaveLines`", "refuse the reserved names",
		"**Options for a server `Dial` starts.**", "`Args`, `Env`",
		fmt.Sprintf("`Dial` starts up to %d copies that exit before they are ready", maxStartFailures),
		"**How long `Listen` may wait.**", "Give `Listen`'s context at least that",
		"**What new clients pay during a drain.**", "the longest request in flight sets every new client's wait",
	} {
		assert.Contains(t, section, want)
	}
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "(docs/operations.md#a-daemon-of-your-own)", "the README points a newcomer there")
	assert.Contains(t, string(readme), "daemon.ServeHTTP(ctx, srv, ", "the README's server uses ServeHTTP")
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	assert.Contains(t, strings.Join(strings.Fields(string(doc)), " "), "// Every connection Accept returned is the leaving server's to answer", "the package doc says what a server owes what it accepted")
}
