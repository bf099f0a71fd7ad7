package durable

import (
	"bytes"
	"strings"
)

// JoinLines is the content of a file of lines: each line ended by "\n".
// bad is the index of the first line that contains a "\n" itself, which
// would read back as two (data is nil then), or -1.
func JoinLines(lines []string) (data []byte, bad int) {
	var b bytes.Buffer
	for i, l := range lines {
		if strings.ContainsRune(l, '\n') {
			return nil, i
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.Bytes(), -1
}

// SplitLines is the lines of data, the content of a file of lines, without
// their "\n"; a last line without its "\n" is a line too. Empty data gives
// an empty, non-nil slice.
func SplitLines(data []byte) []string {
	lines := []string{}
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			lines = append(lines, string(data))
			break
		}
		lines = append(lines, string(data[:i]))
		data = data[i+1:]
	}
	return lines
}

// AppendLine is data, the content of a file of lines, with line added as
// its last line: a last line of data without its "\n" is completed first.
// data itself is not changed.
func AppendLine(data []byte, line string) []byte {
	out := make([]byte, 0, len(data)+len(line)+2)
	out = append(out, data...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, line...)
	return append(out, '\n')
}
