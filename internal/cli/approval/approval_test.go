package approval

import (
	"bytes"
	"testing"

	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

func obj(t *testing.T, line string) *proto.Object {
	t.Helper()
	o, err := proto.ParseObject([]byte(line), false)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The command shown beside a request answers it as typed: a call id that
// the shell would split or expand is quoted, with its control characters
// made harmless.
func TestCommand(t *testing.T) {
	shared := &clienv.Where{Loc: client.Loc{Agent: "coder", Space: "team"}, Scope: "shared"}
	if got, want := Command(shared, obj(t, `{"type":"question","run":"ctx-1","id":"c"}`)), "ctx agent answer coder ctx-1 c --shared team TEXT"; got != want {
		t.Errorf("shared: %s, want %s", got, want)
	}
	for _, c := range []struct{ line, want string }{
		{`{"type":"approval_request","run":"ctx-1","id":"call_1","name":"fs.write"}`, "ctx agent approve coder ctx-1 call_1 [--deny|--run|--stop]"},
		{`{"type":"question","run":"ctx-1","id":"toolu_01"}`, "ctx agent answer coder ctx-1 toolu_01 TEXT"},
		{`{"type":"approval_request","run":"ctx-1","id":"a b'$(x)\u001b"}`, `ctx agent approve coder ctx-1 'a b'\''$(x) ' [--deny|--run|--stop]`},
		{`{"type":"approval_request","run":"ctx-1","id":""}`, "ctx agent approve coder ctx-1 '' [--deny|--run|--stop]"},
	} {
		if got := Command(&clienv.Where{Loc: client.Loc{Agent: "coder"}, Scope: "private"}, obj(t, c.line)); got != c.want {
			t.Errorf("Command(%s)\n got %s\nwant %s", c.line, got, c.want)
		}
	}
}

func TestDecisionOf(t *testing.T) {
	for _, c := range []struct {
		flags map[string]string
		want  string
		bad   bool
	}{
		{nil, "allow_once", false},
		{map[string]string{"deny": "true"}, "deny", false},
		{map[string]string{"run": "true"}, "allow_run", false},
		{map[string]string{"stop": "true"}, "stop", false},
		{map[string]string{"stop": "true", "run": "true"}, "", true},
	} {
		got, err := decisionOf(&clienv.Parsed{Vals: c.flags})
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("%v: %q, %v", c.flags, got, err)
		}
	}
}

// pending's lines in a pipe: tab-separated, no header; a shared session
// as SPACE/SESSION; arguments compact, a question on one line.
func TestPrintPending(t *testing.T) {
	lines := []string{
		`{"type":"pending","agent":"coder","session":"default","scope":"private","run":"ctx-1","id":"c1","kind":"approval","name":"shell.exec","arguments":{ "argv": ["ls", "-l"] },"since":"2026-12-02T03:00:00.000Z"}`,
		`{"type":"pending","agent":"coder","session":"s2","scope":"shared","space":"team","run":"ctx-2","id":"c2","kind":"question","name":"ask_user","text":"which\tbranch?\n","since":"2026-12-02T03:00:01.000Z"}`,
	}
	var calls []pendingCall
	for _, l := range lines {
		calls = append(calls, pendingCall{f: client.Frame{Line: []byte(l)}, o: obj(t, l)})
	}
	var b bytes.Buffer
	printPending(&b, calls)
	want := "coder\tdefault\tctx-1\tc1\tapproval\tshell.exec\t{\"argv\":[\"ls\",\"-l\"]}\n" +
		"coder\tteam/s2\tctx-2\tc2\tquestion\task_user\twhich branch? \n"
	if b.String() != want {
		t.Fatalf("got  %q\nwant %q", b.String(), want)
	}
}
