package startup

import (
	"bytes"

	"github.com/runnerstate/runnerstate/internal/durable"
)

// MaxLogTail bounds a Failure's LogTail.
const MaxLogTail = 4 << 10

// maxLogRead bounds how much of a log is read to find its tail.
const maxLogRead = 64 << 20

// LogTail is the last lines written to the log at path from offset on, at
// most MaxLogTail bytes; "" when there is no log or it cannot be read.
func LogTail(path string, from int64) string {
	if path == "" {
		return ""
	}
	data, err := durable.ReadFile(path, maxLogRead)
	if err != nil || int64(len(data)) <= from {
		return ""
	}
	data = data[from:]
	if len(data) > MaxLogTail {
		data = data[len(data)-MaxLogTail:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 && i < len(data)-1 {
			data = data[i+1:]
		}
	}
	return string(data)
}
