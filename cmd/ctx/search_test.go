package main

import (
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/proto"
)

func searchAnswer(r *proto.Request) []string {
	switch r.Query {
	case "nothing":
		return []string{`{"type":"searched","sessions":2,"matches":0,"truncated":false}`}
	case "many":
		return []string{`{"type":"match","session":"s1","run":"R1","role":"user","ts":"T","text":"many"}`,
			`{"type":"searched","sessions":1,"matches":1000,"truncated":true}`}
	case "broken":
		return []string{`{"type":"match","session":"s1","run":"R1","role":"user","ts":"T","text":"broken"}`}
	case "bad":
		return []string{`{"type":"error","code":"EINVAL","message":"search: EINVAL: no"}`}
	}
	return []string{
		`{"type":"match","session":"s1","run":"R1","role":"user","ts":"T","text":"我们讨论文件系统"}`,
		`{"type":"error","code":"EIO","message":"search s2: EIO: unreadable","session":"s2"}`,
		`{"type":"match","session":"s3","run":"R2","role":"assistant","ts":"T","text":"a\nb 文件"}`,
		`{"type":"searched","sessions":3,"matches":2,"truncated":false}`,
	}
}

func TestSearchCommand(t *testing.T) {
	a := newFakeAgent(t, searchAnswer)
	out, errs, code := ctxRun(a.root, "", "agent", "search", "coder", "文件", "系统")
	if code != 0 || out != "s1\tR1\tuser\t我们讨论文件系统\ns3\tR2\tassistant\ta b 文件\n" {
		t.Fatalf("code %d out %q errs %q", code, out, errs)
	}
	if !strings.Contains(errs, "ctx: search: s2: EIO") {
		t.Fatalf("a session's error: %q", errs)
	}
	r := a.last()
	if r.Op != proto.OpSearch || r.Query != "文件 系统" || r.SessionGiven || r.Scope != "private" {
		t.Fatalf("request %+v", r)
	}
	ctxRun(a.root, "", "agent", "search", "coder", "x", "--session", "s1", "--shared", "team")
	if r := a.last(); r.Session != "s1" || !r.SessionGiven || r.Scope != "shared" || r.Space != "team" {
		t.Fatalf("request %+v", r)
	}
	for _, c := range []struct {
		query string
		code  int
		errs  string
	}{
		{"nothing", 1, ""},
		{"many", 0, "only the first 1 matches are shown"},
		{"broken", 2, "EIO: the reply ended before the search did"},
		{"bad", 2, "ctx: search: EINVAL: no"},
	} {
		_, errs, code := ctxRun(a.root, "", "agent", "search", "coder", c.query)
		if code != c.code || !strings.Contains(errs, c.errs) || (c.errs == "" && errs != "") {
			t.Errorf("%s: code %d errs %q", c.query, code, errs)
		}
	}
	out, _, code = ctxRun(a.root, "", "agent", "search", "coder", "many", "--json")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"truncated":true`) {
		t.Fatalf("--json: code %d out %q", code, out)
	}
	if _, _, code := ctxRun(a.root, "", "agent", "search", "coder"); code != 2 {
		t.Fatalf("no query: %d", code)
	}
	if _, errs, code := ctxRun(a.root, "", "agent", "search", "coder", "x", "--session", "a/b"); code != 2 || !strings.Contains(errs, "EINVAL") {
		t.Fatalf("bad session: %d %q", code, errs)
	}
}
