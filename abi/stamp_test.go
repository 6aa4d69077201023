package abi

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// TestStampWriter: each line appended through the mount gets its
// writer's uid as its last field; a line that carries the writer's own
// keeps it as it is; any other uid, a second one, or one spelled with
// escapes or as another number is EINVAL, and so is a line that the
// field would take over the line limit.
func TestStampWriter(t *testing.T) {
	good := []struct{ in, want string }{
		{`{"role":"user","content":"hi"}`, `{"role":"user","content":"hi","uid":1001}`},
		{`{}`, `{"uid":1001}`},
		{` { } `, ` { "uid":1001} `},
		{`{"a":{"uid":0}}`, `{"a":{"uid":0},"uid":1001}`},
		{`{"uid":1001,"a":1}`, `{"uid":1001,"a":1}`},
		{`{"uid" : 1001}`, `{"uid" : 1001}`},
		{`{"u\u0069d":1001}`, `{"u\u0069d":1001}`},
		{`{"note":"\u00e9"}`, `{"note":"\u00e9","uid":1001}`},
	}
	for _, c := range good {
		got, err := StampWriter([]byte(c.in+"\n"+c.in+"\n"), 1001)
		if err != nil || string(got) != c.want+"\n"+c.want+"\n" {
			t.Errorf("stamp %s: %q, %v; want %s twice", c.in, got, err, c.want)
		}
	}
	bad := []string{
		`{"uid":0}`, `{"uid":"1001"}`, `{"uid":1001.0}`, `{"uid":1001,"uid":1001}`,
		`{"uid":1001,"uid":0}`, `{"u\u0069d":0}`,
		`{"a":"` + strings.Repeat("x", MaxLineBytes-len(`{"a":""}`)) + `"}`,
	}
	for _, line := range bad {
		if _, err := StampWriter([]byte(`{"ok":1}`+"\n"+line+"\n"), 1001); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("stamp %.60s: %v, want EINVAL naming line 2", line, err)
		}
	}
	fits := `{"a":"` + strings.Repeat("x", MaxLineBytes-len(`{"a":"","uid":1001}`)) + `"}`
	if got, err := StampWriter([]byte(fits+"\n"), 1001); err != nil || len(got) != MaxLineBytes+1 {
		t.Errorf("a line that fits with its uid: %d bytes, %v", len(got), err)
	}
}

// FuzzStampWriter: stamping never makes an invalid line valid nor a
// valid one invalid (the log validates the stamped lines alone), and
// what it refuses is EINVAL.
func FuzzStampWriter(f *testing.F) {
	for _, seed := range []string{
		`{"a":1}`, `{}`, ` { } `, `{"a":1} x`, `[1]`, `{"a":"x}`, `{"a":[}`, `{"a":1,}`,
		`{,}`, `{"a" }`, `{"a":"\`, `x{}`, `{"a":{"b":1}`, `{"a":"\u00`, "{\"a\":\"\xff}", `}`, `{`,
		`{"uid":1001}`, `{"a":[1,{"uid":2}]}`, `{"a":1}}`, `{{}}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if strings.Contains(line, "\n") || len(line) > 4096 {
			return
		}
		out, err := StampWriter([]byte(line+"\n"), 1001)
		if err != nil {
			if !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("%q: %v, want EINVAL", line, err)
			}
			return
		}
		valid := CheckLogLine([]byte(line)) == nil
		if stamped := CheckLogLine(out[:len(out)-1]) == nil; stamped != valid {
			t.Fatalf("%q (valid %v) stamped %q (valid %v)", line, valid, out, stamped)
		}
	})
}
