package spawn

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNotifyOneDatagram(t *testing.T) {
	for name, addr := range map[string]string{
		"path":     filepath.Join(t.TempDir(), "notify.sock"),
		"abstract": "@runnerstate-sdnotify-test-" + strconv.Itoa(os.Getpid()),
	} {
		t.Run(name, func(t *testing.T) {
			listen := addr
			if listen[0] == '@' {
				listen = "\x00" + listen[1:]
			}
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: listen, Net: "unixgram"})
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, Notify(addr, NotifyReadyMessage(42)))
			buf := make([]byte, 256)
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := conn.Read(buf)
			require.NoError(t, err)
			assert.Equal(t, "READY=1\nMAINPID=42", string(buf[:n]))
		})
	}
}
