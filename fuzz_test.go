//go:build linux

package runnerstate

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/runnerstate/runnerstate/internal/gate"
)

// Fuzz targets for every parser of a file or kernel table this package reads.
// Each file may have been written by another version, a crashed writer, a
// user with an editor or someone hostile, so each parser must answer every
// input with a value or an error and never panic; where a value can be
// written back, writing it and parsing again must give the same value.
//
// The seeds in testdata/fuzz/<target> run with every `go test`; CI fuzzes
// each target for a few seconds:
//
//	go test -run='^$' -fuzz='^FuzzParseRecord$' -fuzztime=10s .
//
// (one target per command: go test fuzzes one target at a time).

// remarshal marshals v, failing the test when a parsed value cannot be
// written back: a value this package accepts must be one it could write.
func remarshal(t *testing.T, v any) []byte {
	t.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("a parsed value cannot be marshalled again: %v (%+v)", err, v)
	}
	return out
}

func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"pid":42,"process":{"instance":"0123456789abcdef0123456789abcdef","pid":42,"start_ticks":123,"start_time":"2024-05-01T10:00:00Z","boot_id":"b","pid_ns":"4:4026531836","machine":"m","hostname":"h"},"started_at":"2024-05-01T10:00:01.5+02:00","max_parallel":2,"specs":["a"],"meta":{"k":[1,2]}}`))
	f.Add([]byte(`{"pid":7}`))
	f.Add([]byte(`{"pid":7,"process":{"pid":8}}`))
	f.Add([]byte("\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := parseRecord(data)
		if err != nil {
			return
		}
		if rec.PID <= 0 {
			t.Fatalf("accepted a record naming pid %d: %q", rec.PID, data)
		}
		if rec.Process.PID != 0 && rec.Process.PID != rec.PID {
			t.Fatalf("accepted pid %d with process pid %d", rec.PID, rec.Process.PID)
		}
		out := remarshal(t, rec)
		again, err := parseRecord(out)
		if err != nil {
			t.Fatalf("a record written back does not parse: %v\n%s", err, out)
		}
		if out2 := remarshal(t, again); !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the record:\n%s\n%s", out, out2)
		}
	})
}

func FuzzParseLockContent(f *testing.F) {
	f.Add([]byte(`{"instance":"0123456789abcdef0123456789abcdef","pid":42,"start_ticks":123,"start_time":"2024-05-01T10:00:00Z","boot_id":"b","pid_ns":"4:4026531836"}` + "\n"))
	f.Add([]byte("1234\n"))
	f.Add([]byte("  1234  \n{garbage"))
	f.Add([]byte("0\n"))
	f.Add([]byte("-5\n"))
	f.Add([]byte("{\"pid\":3}\nleftover tail of a longer identity\"}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, ok := parseLockContent(data)
		if !ok {
			if id != (Identity{}) {
				t.Fatalf("refused content but returned %+v", id)
			}
			return
		}
		if id.PID <= 0 {
			t.Fatalf("accepted pid %d from %q", id.PID, data)
		}
		// Only the first line counts: a writer that died between writing a
		// shorter identity and cutting the old tail leaves a second line.
		first := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			first = data[:i]
			if id2, ok2 := parseLockContent(first); !ok2 || !sameIdentityJSON(t, id, id2) {
				t.Fatalf("the lines after the first changed the answer for %q", data)
			}
		}
		var line []byte
		if trimmed := bytes.TrimSpace(first); len(trimmed) > 0 && trimmed[0] == '{' {
			line = append(remarshal(t, id), '\n')
		} else {
			// The legacy bare pid carries nothing else.
			if id != (Identity{PID: id.PID}) {
				t.Fatalf("a bare pid gave more than a pid: %+v", id)
			}
			line = []byte(strconv.Itoa(id.PID) + "\n")
		}
		again, ok := parseLockContent(line)
		if !ok || !sameIdentityJSON(t, id, again) {
			t.Fatalf("round trip of %q through %q gave %+v, %v", data, line, again, ok)
		}
	})
}

func sameIdentityJSON(t *testing.T, a, b Identity) bool {
	return bytes.Equal(remarshal(t, a), remarshal(t, b))
}

func FuzzParseRestart(f *testing.F) {
	f.Add([]byte(`{"mode":"now","requested_at":"2024-05-01T10:00:00Z","by":{"instance":"x","pid":9,"start_time":"0001-01-01T00:00:00Z"},"for":"0123"}`))
	f.Add([]byte(`{"mode":"drain","requested_at":"2024-05-01T10:00:00.123456789-07:00","by":{"pid":1,"start_time":"0001-01-01T00:00:00Z"},"for":""}`))
	f.Add([]byte(`{"mode":"later"}`))
	f.Add([]byte(`{"mode":"NOW"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := parseRestart(data)
		if err != nil {
			return
		}
		if req.Mode != RestartDrain && req.Mode != RestartNow {
			t.Fatalf("accepted mode %q", req.Mode)
		}
		out := remarshal(t, req)
		again, err := parseRestart(out)
		if err != nil {
			t.Fatalf("a request written back does not parse: %v\n%s", err, out)
		}
		if !sameRequest(req, again) || !bytes.Equal(out, remarshal(t, again)) {
			t.Fatalf("round trip changed the request:\n%s\n%+v", out, again)
		}
	})
}

func FuzzParseGate(f *testing.F) {
	f.Add([]byte(`{"seq":5,"admitted":3,"waiting":[{"seq":4,"starter":{"instance":"a","pid":10,"start_ticks":1,"start_time":"2024-05-01T10:00:00Z"},"since":"2024-05-01T10:00:00Z"}],"attempt":{"for":"b","pid":11,"mode":"now","first_request_at":"2024-05-01T10:00:00Z","term_at":"2024-05-01T10:00:05Z"}}`))
	f.Add([]byte(`{"seq":0,"admitted":0,"waiting":null}`))
	f.Add([]byte(`{"seq":18446744073709551615,"waiting":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gate.Parse(data)
		if err != nil {
			return
		}
		out := remarshal(t, g)
		again, err := gate.Parse(out)
		if err != nil {
			t.Fatalf("a gate written back does not parse: %v\n%s", err, out)
		}
		if out2 := remarshal(t, again); !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the gate:\n%s\n%s", out, out2)
		}
	})
}

func FuzzParseScopeOwner(f *testing.F) {
	f.Add([]byte(`{"data_dir":"/data/a","pid":42,"process":{"instance":"x","pid":42,"start_ticks":7,"start_time":"2024-05-01T10:00:00Z"}}`))
	f.Add([]byte(`{"data_dir":""}`))
	f.Add([]byte(`{"data_dir":"/d","pid":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		owner, err := parseScopeOwner(data)
		if err != nil {
			return
		}
		if owner.DataDir == "" {
			t.Fatalf("accepted an owner without a data dir: %q", data)
		}
		out := remarshal(t, owner)
		again, err := parseScopeOwner(out)
		if err != nil {
			t.Fatalf("an owner written back does not parse: %v\n%s", err, out)
		}
		if out2 := remarshal(t, again); !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the owner:\n%s\n%s", out, out2)
		}
	})
}

// FuzzLines: what SaveLines writes, LoadLines reads back line for line.
func FuzzLines(f *testing.F) {
	f.Add("a\x1eb\x1e\x1e# comment")
	f.Add("")
	f.Add("\r\x1e \x1e\x00")
	f.Fuzz(func(t *testing.T, joined string) {
		var lines []string
		if joined != "" {
			lines = strings.Split(joined, "\x1e")
		}
		data, err := joinLines("d/n", lines)
		if strings.Contains(joined, "\n") {
			if err == nil {
				t.Fatalf("a line with a newline was accepted: %q", joined)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		got := splitLines(data)
		if len(got) != len(lines) {
			t.Fatalf("%d lines written, %d read: %q", len(lines), len(got), data)
		}
		for i := range lines {
			if got[i] != lines[i] {
				t.Fatalf("line %d: wrote %q, read %q", i, lines[i], got[i])
			}
		}
	})
}
