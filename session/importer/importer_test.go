package importer

import (
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
)

const uuid = "4bc00285-d2db-45dd-8cc8-3e3ba6199b24"

// TestParseHeader: what a client may name, and who may name another home.
func TestParseHeader(t *testing.T) {
	ann, root := layout.Caller{Uid: 1001}, layout.Caller{Uid: 0}
	head := func(extra string) []byte {
		return []byte(`{"op":"import","from":"claude-code","uuid":"` + uuid + `","messages":2` + extra + `}`)
	}
	if _, uid, err := ParseHeader(ann, head("")); err != nil || uid != 1001 {
		t.Errorf("her own home: uid %d, %v", uid, err)
	}
	if _, uid, err := ParseHeader(root, head(`,"uid":1001`)); err != nil || uid != 1001 {
		t.Errorf("root for 1001: uid %d, %v", uid, err)
	}
	for _, c := range []struct {
		name string
		as   layout.Caller
		line string
		want syscall.Errno
	}{
		{"another uid's home", ann, string(head(`,"uid":1002`)), syscall.EACCES},
		{"root's home", ann, string(head(`,"uid":0`)), syscall.EACCES},
		{"another CLI", ann, strings.Replace(string(head("")), "claude-code", "gemini", 1), syscall.EINVAL},
		{"an upper-case uuid", ann, strings.Replace(string(head("")), "bc", "BC", 1), syscall.EINVAL},
		{"a path for a uuid", ann, strings.Replace(string(head("")), uuid, "../../x", 1), syscall.EINVAL},
		{"no messages", ann, strings.Replace(string(head("")), `"messages":2`, `"messages":0`, 1), syscall.EINVAL},
		{"a relative cwd", ann, string(head(`,"cwd":"work"`)), syscall.EINVAL},
		{"a negative uid", ann, string(head(`,"uid":-1`)), syscall.EINVAL},
	} {
		_, _, err := ParseHeader(c.as, []byte(c.line))
		testkit.WantErrno(t, c.name, err, c.want)
	}
}

// TestMessage: each line is judged and marked; a hostile one is EINVAL
// naming its number.
func TestMessage(t *testing.T) {
	m, err := message(1, []byte(`{"role":"assistant","content":[{"type":"text","text":"hi"}],"ts":"2026-12-02T00:00:00.000Z"}`), "codex")
	if err != nil || m.Str(Marker) != "codex" || m.Has("run") {
		t.Fatalf("a good line: %v %v", m, err)
	}
	for _, bad := range []string{
		`{"role":"user","content":"a","run":"ctx-00000000000000000000000000000000"}`,
		`{"role":"system","content":"a"}`,
		`{"role":"user"}`,
		`{"role":"user","content":"a","imported":"claude-code"}`,
		`{"role":"user","content":"a","role":"tool"}`,
		`["role","user"]`,
		"{\"role\":\"user\",\"content\":\"\xff\"}",
	} {
		_, err := message(7, []byte(bad), "codex")
		testkit.WantErrno(t, bad, err, syscall.EINVAL)
		if err != nil && !strings.Contains(err.Error(), "message 7") {
			t.Errorf("%s: %v does not name the message", bad, err)
		}
	}
}
