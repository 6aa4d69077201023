package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

func TestSessionListJSON(t *testing.T) {
	root := t.TempDir()
	s1 := writeSession(t, root, "coder", "s1", "", "")
	writeSession(t, root, "coder", "s2", "", "")
	files := map[string]string{
		"s1/state": "idle\n", "s1/updated_at": "1700000100\n", "s1/created_at": "1700000000\n",
		"s1/meta.json": `{"client":"ctx","scope":"private","name":"Ada","self_id":"ada","rule":"Be brief.","reasoning":{"effort":"low"}}`,
		"s2/state":     "done\n",
		"s2/meta.json": `{"client":"ctx","scope":"private"}`,
		"index/list":   "s2\ngone\ns1\n",
	}
	dir := filepath.Dir(s1)
	testkit.Must(t, os.MkdirAll(filepath.Join(dir, "index"), 0o755))
	for name, v := range files {
		testkit.Must(t, os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644))
	}
	out, errs, code := ctxRun(root, "", "agent", "session", "list", "coder", "--json")
	want := `{"name":"s2","state":"done"}
{"name":"s1","state":"idle","updated_at":1700000100,"created_at":1700000000,"meta":{"name":"Ada","self_id":"ada","rule":"Be brief.","reasoning":{"effort":"low"}}}
`
	if out != want || errs != "" || code != 0 {
		t.Fatalf("code %d errs %q out:\n%s\nwant:\n%s", code, errs, out, want)
	}
}

func TestSessionListMissing(t *testing.T) {
	root := t.TempDir()
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "home/1000"), 0o700))
	_, errs, code := ctxRun(root, "", "agent", "session", "list", "ghost")
	if code != 1 || errs != `ctx: session list: ENOENT: no agent "ghost" (ctx agent list shows the agents)`+"\n" {
		t.Errorf("unknown agent: code %d errs %q", code, errs)
	}
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent/fresh.d"), 0o755))
	for _, args := range [][]string{{"fresh"}, {"fresh", "--json"}} {
		out, errs, code := ctxRun(root, "", append([]string{"agent", "session", "list"}, args...)...)
		if code != 0 || out != "" || errs != "" {
			t.Errorf("%q: code %d out %q errs %q", args, code, out, errs)
		}
	}
}
