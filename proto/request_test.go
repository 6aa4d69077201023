package proto

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
)

var requestCases = []struct {
	line  string
	errno syscall.Errno // 0: accepted
}{
	{`{"op":"ping"}`, 0},
	{`{"op":"send","id":"c1","input":"hello"}`, 0},
	{`{"op":"send","id":"c1","session":"review-1","scope":"private","cwd":"/workspace","input":"hi","extra":[1,2]}`, 0},
	{`{"op":"send","id":"c1","scope":"shared","space":"team","input":"hi"}`, 0},
	{`{"op":"send","id":"c1","scope":"temp","input":""}`, 0},
	{`{"op":"cancel","id":"ctx-0123456789abcdef0123456789abcdef"}`, 0},
	{`{"op":"cancel","id":"c1"}`, 0},
	{`{"op":"status","session":"default"}`, 0},
	{`{"op":"resume","session":"default","after":"ctx-0123456789abcdef0123456789abcdef"}`, 0},
	{`{"op":"resume"}`, 0},
	{`{"op":"search","query":"文件"}`, 0},
	{`{"op":"nope"}`, syscall.EINVAL},
	{`{}`, syscall.EINVAL},
	{`[]`, syscall.EINVAL},
	{`not json`, syscall.EINVAL},
	{`{"op":"send","input":"hi"}`, syscall.EINVAL},                 // no id
	{`{"op":"send","id":"c1"}`, syscall.EINVAL},                    // no input
	{`{"op":"send","id":"c1","input":"a\u0000b"}`, syscall.EINVAL}, // NUL
	{`{"op":"send","id":"c1","input":7}`, syscall.EINVAL},          // not a string
	{`{"op":"send","id":"../x","input":"hi"}`, syscall.EINVAL},     // bad client id
	{`{"op":"send","id":"c1","session":"index","input":"hi"}`, syscall.EINVAL},
	{`{"op":"send","id":"c1","session":"a/b","input":"hi"}`, syscall.EINVAL},
	{`{"op":"send","id":"c1","scope":"public","input":"hi"}`, syscall.EINVAL},
	{`{"op":"send","id":"c1","scope":"shared","input":"hi"}`, syscall.EINVAL}, // no space
	{`{"op":"send","id":"c1","space":"team","input":"hi"}`, syscall.EINVAL},   // space without shared
	{`{"op":"send","id":"c1","cwd":"rel","input":"hi"}`, syscall.EINVAL},
	{`{"op":"send","id":"c1","cwd":"/a/../b","input":"hi"}`, syscall.EINVAL},
	{`{"op":"send","id":"c1","cwd":"/a\nb","input":"hi"}`, syscall.EINVAL},
	{`{"op":"resume","after":"r1"}`, syscall.EINVAL},
	{`{"op":"cancel"}`, syscall.EINVAL},
	{`{"op":"ping"} {"op":"ping"}`, syscall.EINVAL},
}

func TestParseRequest(t *testing.T) {
	for _, c := range requestCases {
		_, err := ParseRequest([]byte(c.line + "\n"))
		if got := abi.Errno(err); got != c.errno {
			t.Errorf("ParseRequest(%s): errno %v (%v), want %v", c.line, got, err, c.errno)
		}
	}
}

func TestParseRequestDefaults(t *testing.T) {
	r, err := ParseRequest([]byte(`{"op":"send","id":"c1","input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r.Session != "default" || r.SessionGiven || r.Scope != "private" || r.ScopeGiven || r.Cwd != "" {
		t.Fatalf("defaults: %+v", r)
	}
}

// A request written to a shared session's ctl takes the scope and space
// it leaves out from the session: it may name its scope alone or its
// space alone. What it names stays its own, for BeginControl to compare;
// a home's ctl says no space.
func TestParseControlRequestPlace(t *testing.T) {
	for _, c := range []struct {
		space, line       string
		errno             syscall.Errno
		wantScope, wantSp string
	}{
		{"team", `{"op":"status"}`, 0, "shared", "team"},
		{"team", `{"op":"status","scope":"shared"}`, 0, "shared", "team"},
		{"team", `{"op":"status","space":"team"}`, 0, "shared", "team"},
		{"team", `{"op":"status","space":"other"}`, 0, "shared", "other"},
		{"team", `{"op":"status","scope":"private"}`, 0, "private", ""},
		{"team", `{"op":"status","scope":"private","space":"team"}`, syscall.EINVAL, "", ""},
		{"team", `{"op":"status","space":"bad name"}`, syscall.EINVAL, "", ""},
		{"", `{"op":"status","scope":"shared"}`, syscall.EINVAL, "", ""},
		{"", `{"op":"status","space":"team"}`, syscall.EINVAL, "", ""},
		{"", `{"op":"status"}`, 0, "private", ""},
	} {
		r, err := ParseControlRequest([]byte(c.line), c.space)
		if got := abi.Errno(err); got != c.errno {
			t.Errorf("ParseControlRequest(%s, %q): errno %v (%v), want %v", c.line, c.space, got, err, c.errno)
			continue
		}
		if err == nil && (r.Scope != c.wantScope || r.Space != c.wantSp) {
			t.Errorf("ParseControlRequest(%s, %q): scope %q space %q, want %q %q", c.line, c.space, r.Scope, r.Space, c.wantScope, c.wantSp)
		}
	}
}

func TestParseRequestSize(t *testing.T) {
	body := `{"op":"send","id":"c1","input":"` + strings.Repeat("x", abi.MaxRequestBytes) + `"}`
	if _, err := ParseRequest([]byte(body)); !errors.Is(err, syscall.EMSGSIZE) {
		t.Fatalf("oversized request: %v, want EMSGSIZE", err)
	}
	pad := abi.MaxRequestBytes - len(`{"op":"send","id":"c1","input":""}`)
	exact := `{"op":"send","id":"c1","input":"` + strings.Repeat("x", pad) + `"}`
	if _, err := ParseRequest([]byte(exact + "\n")); err != nil {
		t.Fatalf("request of exactly the limit: %v", err)
	}
}

func TestObjectOrderAndDuplicates(t *testing.T) {
	o, err := ParseObject([]byte(`{"b":1,"a":{"x":[1,2]},"c":"s"}`), true)
	if err != nil {
		t.Fatal(err)
	}
	o.Set("a", 2)
	o.Set("d", "new")
	if got := string(o.Line()); got != "{\"b\":1,\"a\":2,\"c\":\"s\",\"d\":\"new\"}\n" {
		t.Fatalf("order: %s", got)
	}
	if _, err := ParseObject([]byte(`{"a":1,"a":2}`), true); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("duplicate key: %v, want EINVAL", err)
	}
	if o, err := ParseObject([]byte(`{"a":1,"a":2}`), false); err != nil || string(o.Raw("a")) != "2" {
		t.Fatalf("lenient duplicate: %v %v", o, err)
	}
}

// FuzzParseRequest: the parser never panics, refuses with EINVAL or
// EMSGSIZE only, and what it accepts has valid names and a known op.
func FuzzParseRequest(f *testing.F) {
	for _, c := range requestCases {
		f.Add([]byte(c.line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseRequest(line)
		if err != nil {
			if e := abi.Errno(err); e != syscall.EINVAL && e != syscall.EMSGSIZE {
				t.Fatalf("errno %v", e)
			}
			return
		}
		if !abi.ValidSessionName(r.Session) || !abi.ValidScope(r.Scope) {
			t.Fatalf("accepted bad location %+v", r)
		}
		switch r.Op {
		case OpSend:
			if !abi.ValidName(r.ID) || strings.ContainsRune(r.Input, 0) || (r.Cwd != "" && abi.CheckCwd(r.Cwd) != nil) {
				t.Fatalf("accepted bad send %+v", r)
			}
		case OpSearch:
			if r.Query == "" || len(r.Query) > MaxQueryBytes || strings.ContainsRune(r.Query, 0) || r.Scope == "temp" {
				t.Fatalf("accepted bad search %+v", r)
			}
		case OpArchivable:
			checkArchivableAccepted(t, r)
		case OpCancel, OpStatus, OpResume, OpPing:
		default:
			t.Fatalf("accepted op %q", r.Op)
		}
	})
}

func TestParseSearch(t *testing.T) {
	cases := []struct {
		line  string
		errno syscall.Errno
	}{
		{`{"op":"search","query":"文件"}`, 0},
		{`{"op":"search","query":"x","session":"s1"}`, 0},
		{`{"op":"search","query":"🚀","scope":"shared","space":"team"}`, 0},
		{`{"op":"search","query":"` + strings.Repeat("é", MaxQueryBytes/2) + `"}`, 0},
		{`{"op":"search"}`, syscall.EINVAL},
		{`{"op":"search","query":""}`, syscall.EINVAL},
		{`{"op":"search","query":7}`, syscall.EINVAL},
		{`{"op":"search","query":"a\u0000b"}`, syscall.EINVAL},
		{`{"op":"search","query":"` + strings.Repeat("x", MaxQueryBytes+1) + `"}`, syscall.EINVAL},
		{`{"op":"search","query":"x","scope":"temp"}`, syscall.EINVAL},
	}
	for _, c := range cases {
		r, err := ParseRequest([]byte(c.line))
		if got := abi.Errno(err); got != c.errno {
			t.Errorf("ParseRequest(%.60s): errno %v (%v), want %v", c.line, got, err, c.errno)
		}
		if err == nil && (r.Op != OpSearch || r.Query == "") {
			t.Errorf("ParseRequest(%.60s): %+v", c.line, r)
		}
	}
	r, _ := ParseRequest([]byte(`{"op":"search","query":"文件"}`))
	if r.Query != "文件" || r.SessionGiven {
		t.Fatalf("search request %+v", r)
	}
}
