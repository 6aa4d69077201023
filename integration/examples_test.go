package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// The tests of examples/ run the real files that ship there: the shell
// agent's program, install.sh and prepare-root.sh, wrap-agent, and the
// model definitions.

// exDir is the repository's examples/ directory.
func exDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", "examples"))
	testkit.Must(t, err)
	return d
}

// exRequireBusybox skips (fails with CTXFS_REQUIRE_FUSE) without the static
// busybox that prepare-root.sh copies into the chroot.
func exRequireBusybox(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(busybox); err != nil {
		if os.Getenv("CTXFS_REQUIRE_FUSE") != "" {
			t.Fatalf("%s is missing (apt-get install busybox-static)", busybox)
		}
		t.Skipf("%s is missing", busybox)
	}
}

// exScript runs one of the example scripts with bash as root and returns
// its output and exit status.
func exScript(t *testing.T, script string, args ...string) (string, int) {
	t.Helper()
	out, err := runCmd(t, nil, nil, "/bin/bash", append([]string{filepath.Join(exDir(t), script)}, args...)...)
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			code = ee.ExitCode()
		}
	}
	return out, code
}

// exMustScript is exScript failing the test unless the script exits 0.
func exMustScript(t *testing.T, script string, args ...string) string {
	t.Helper()
	out, code := exScript(t, script, args...)
	if code != 0 {
		t.Fatalf("%s %q: exit %d\n%s", script, args, code, out)
	}
	return out
}

// exWaitSocket waits for an agent's socket.
func exWaitSocket(t *testing.T, s *server, agent string) {
	t.Helper()
	sock := filepath.Join(s.root, "agent", agent+".sock")
	eventually(t, 5*time.Second, "the socket "+sock, func() bool {
		st, err := os.Lstat(sock)
		return err == nil && st.Mode()&os.ModeSocket != 0
	})
}

// exSend sends input to agent as c and returns the frames; the request
// line is JSON-encoded, so any input goes as it is.
func exSend(t *testing.T, s *server, c *cred, agent, session, id, input string) []frame {
	t.Helper()
	req, err := json.Marshal(map[string]string{"op": "send", "id": id, "session": session, "input": input})
	testkit.Must(t, err)
	frames, raw, err := s.requestAs(c, agent, string(req))
	if err != nil {
		t.Fatalf("send %q: %v\n%s\nlog:\n%s", input, err, raw, s.logText())
	}
	if len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
		t.Fatalf("send %q: no done frame: %v\nlog:\n%s", input, frames, s.logText())
	}
	return frames
}

// exFrame is the only frame of type typ, failing the test when there is
// not exactly one.
func exFrame(t *testing.T, frames []frame, typ string) frame {
	t.Helper()
	var found []frame
	for _, f := range frames {
		if f["type"] == typ {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one %s frame, got %d in %v", typ, len(found), frames)
	}
	return found[0]
}

// exText is the text of a message frame or messages.jsonl line whose
// content is [{"type":"text","text":…}].
func exText(t *testing.T, m frame) string {
	t.Helper()
	parts, _ := m["content"].([]any)
	if len(parts) != 1 {
		t.Fatalf("content of %v is not one part", m)
	}
	p, _ := parts[0].(map[string]any)
	text, ok := p["text"].(string)
	if !ok || p["type"] != "text" {
		t.Fatalf("content of %v is not one text part", m)
	}
	return text
}

// exAnswer is the text a person would read: the deltas, else the
// assistant messages.
func exAnswer(t *testing.T, frames []frame) string {
	if text := deltaText(frames); text != "" {
		return text
	}
	var b strings.Builder
	for _, f := range frames {
		if f["type"] == "message" {
			b.WriteString(exText(t, f))
		}
	}
	return b.String()
}

// exJSONLines parses every line of a log, failing the test on a line that
// is not a JSON object or a log that does not end in a newline.
func exJSONLines(t *testing.T, path string) []frame {
	t.Helper()
	b := fileBytes(t, path)
	if b == "" {
		return nil
	}
	if !strings.HasSuffix(b, "\n") {
		t.Fatalf("%s does not end in a newline", path)
	}
	var lines []frame
	for _, l := range strings.Split(strings.TrimSuffix(b, "\n"), "\n") {
		var f frame
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("%s: line %q is not a JSON object: %v", path, l, err)
		}
		lines = append(lines, f)
	}
	return lines
}

// newShellExample starts a server, installs the shell agent with its own
// install.sh and fills uid 1000's root/ with prepare-root.sh, twice (it
// must be idempotent).
func newShellExample(t *testing.T) *server {
	t.Helper()
	requireFUSE(t)
	exRequireBusybox(t)
	s := newServer(t)
	openToAll(t, s.root)
	out := exMustScript(t, "shell-agent/install.sh", "--root", s.root)
	if !strings.Contains(out, "the server answers at") {
		t.Errorf("install.sh did not see the socket:\n%s", out)
	}
	exWaitSocket(t, s, "shell")
	for _, f := range []string{"abi", "isolation", "AGENTS.md"} {
		want := fileBytes(t, filepath.Join(exDir(t), "shell-agent/shell.d", f))
		if got := fileBytes(t, filepath.Join(s.root, "agent/shell.d", f)); got != want {
			t.Errorf("installed shell.d/%s = %q, want %q", f, got, want)
		}
	}
	if st, err := os.Stat(filepath.Join(s.root, "agent/shell")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("installed program: %v %v", st, err)
	}
	exMustScript(t, "shell-agent/prepare-root.sh", "--root", s.root, "1000", "shell")
	root := s.mnt("home/1000/agent/shell/root")
	before := exTree(t, root)
	out = exMustScript(t, "shell-agent/prepare-root.sh", "--root", s.root, "1000", "shell")
	if !strings.Contains(out, "up to date") || !strings.Contains(out, "(0 new applet links") {
		t.Errorf("a second prepare-root.sh should change nothing:\n%s", out)
	}
	if after := exTree(t, root); after != before {
		t.Errorf("a second prepare-root.sh changed root/:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	st, err := os.Stat(filepath.Join(root, "tmp"))
	if err != nil || st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Errorf("root/tmp: %v %v, want mode 1777", st, err)
	}
	if l, err := os.Readlink(filepath.Join(root, "bin/sh")); err != nil || l != "busybox" {
		t.Errorf("root/bin/sh: %q %v, want a link to busybox", l, err)
	}
	return s
}

// exTree describes a tree: each name, its mode and size or link target.
func exTree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(dir, func(p string, st os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %v %d", rel, st.Mode(), st.Size())
		if st.Mode()&os.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			line += " -> " + l
		} else if st.Mode().IsRegular() {
			line += " " + fileBytes(t, p)
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestExampleShellAgent: the shell agent, installed and prepared by its
// own scripts, runs a command in its busybox chroot as uid 1000; every
// byte of the command and of its output survives the trip through JSON,
// and the session records the tool call, the tool message and the answer.
func TestExampleShellAgent(t *testing.T) {
	s := newShellExample(t)
	sessDir := func(name string) string { return s.mnt("home/1000/agent/shell/session/" + name) }

	t.Run("nasty bytes", func(t *testing.T) {
		input := `printf '%s\n' 'say "hi" \back\slash' "it's"
printf 'tab\there\n'
echo 'ünï©ødé ✓ 😀 中文'
printf 'cr\r bell\a esc\033 del\177 nul\000 bad\377 end'
`
		want := "say \"hi\" \\back\\slash\nit's\ntab\there\nünï©ødé ✓ 😀 中文\ncr\r bell\a esc\x1b del\x7f nul\x00 bad\uFFFD end"
		frames := exSend(t, s, jailUser, "shell", "nasty", "n1", input)
		if code := errorCode(frames); code != "" || frames[len(frames)-1]["status"] != "ok" {
			t.Fatalf("run failed: %v\nlog:\n%s", frames, s.logText())
		}
		call := exFrame(t, frames, "tool_call")
		args, _ := call["arguments"].(map[string]any)
		if call["name"] != "sh" || args["command"] != input {
			t.Errorf("tool_call %v: want name sh and command %q", call, input)
		}
		res := exFrame(t, frames, "tool_result")
		if res["tool_call_id"] != call["id"] || res["content"] != want || res["is_error"] != false {
			t.Errorf("tool_result %v\nwant content %q, is_error false", res, want)
		}
		if got := exText(t, exFrame(t, frames, "message")); got != want {
			t.Errorf("answer %q, want %q", got, want)
		}

		msgs := exJSONLines(t, filepath.Join(sessDir("nasty"), "messages.jsonl"))
		var roles []string
		for _, m := range msgs {
			roles = append(roles, fmt.Sprint(m["role"]))
			switch m["role"] {
			case "user":
				if m["content"] != input {
					t.Errorf("user message %v", m)
				}
			case "tool":
				parts, _ := m["content"].([]any)
				if len(parts) != 1 {
					t.Fatalf("tool message %v", m)
				}
				p := parts[0].(map[string]any)
				if p["type"] != "tool_result" || p["content"] != want || p["is_error"] != false || p["tool_call_id"] != call["id"] {
					t.Errorf("tool message %v", m)
				}
			case "assistant":
				if got := exText(t, m); got != want {
					t.Errorf("recorded answer %q, want %q", got, want)
				}
			}
		}
		if strings.Join(roles, " ") != "user tool assistant" {
			t.Errorf("messages.jsonl roles %v, want user tool assistant", roles)
		}
		var types []string
		for _, e := range exJSONLines(t, filepath.Join(sessDir("nasty"), "events.jsonl")) {
			types = append(types, fmt.Sprint(e["type"]))
			if e["type"] == "tool_call" {
				if a, _ := e["arguments"].(map[string]any); a["command"] != input {
					t.Errorf("recorded tool_call %v", e)
				}
			}
			if e["type"] == "tool_result" && e["content"] != want {
				t.Errorf("recorded tool_result %v", e)
			}
		}
		if got := strings.Join(types, " "); !strings.Contains(got, "tool_call tool_result message done") {
			t.Errorf("events.jsonl types %q", got)
		}
		eventually(t, 5*time.Second, "latest.md in the store (written behind)", func() bool {
			return fileBytes(t, filepath.Join(sessDir("nasty"), "latest.md")) == want+"\n"
		})
	})

	t.Run("failing command", func(t *testing.T) {
		frames := exSend(t, s, jailUser, "shell", "fail", "f1", "echo oops >&2; exit 3")
		res := exFrame(t, frames, "tool_result")
		if res["is_error"] != true || res["content"] != "oops\n" {
			t.Errorf("tool_result %v, want is_error true and content \"oops\\n\"", res)
		}
		if got := exText(t, exFrame(t, frames, "message")); got != "oops\nexit status 3" {
			t.Errorf("answer %q", got)
		}
		if frames[len(frames)-1]["status"] != "ok" {
			t.Errorf("the agent itself should end ok: %v", frames[len(frames)-1])
		}
		frames = exSend(t, s, jailUser, "shell", "fail", "f2", "true")
		if res := exFrame(t, frames, "tool_result"); res["is_error"] != false || res["content"] != "" {
			t.Errorf("tool_result of true: %v", res)
		}
		if got := exText(t, exFrame(t, frames, "message")); got != "exit status 0" {
			t.Errorf("answer of true %q", got)
		}
		exJSONLines(t, filepath.Join(sessDir("fail"), "messages.jsonl"))
		exJSONLines(t, filepath.Join(sessDir("fail"), "events.jsonl"))
	})

	t.Run("nothing of the host", func(t *testing.T) {
		frames := exSend(t, s, jailUser, "shell", "jail", "j1", "cat /etc/hostname")
		res := exFrame(t, frames, "tool_result")
		content, _ := res["content"].(string)
		if res["is_error"] != true || !strings.Contains(content, "can't open '/etc/hostname'") {
			t.Errorf("cat /etc/hostname inside the jail: %v", res)
		}
		if host := strings.TrimSpace(fileBytes(t, "/etc/hostname")); host != "" && strings.Contains(content, host) {
			t.Errorf("the jail shows the host's hostname %q: %q", host, content)
		}
		frames = exSend(t, s, jailUser, "shell", "jail", "j2", "test -e /etc || echo none; id -u; ls /")
		content, _ = exFrame(t, frames, "tool_result")["content"].(string)
		lines := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
		if len(lines) < 3 || lines[0] != "none" || lines[1] != "1000" {
			t.Fatalf("the jail has /etc, or runs as another uid: %q", content)
		}
		// proc: the jail's own /proc (TestJailProcShowsOnlyTheJail)
		allowed := map[string]bool{"bin": true, "dev": true, "proc": true, "tmp": true, strings.Split(strings.TrimPrefix(s.root, "/"), "/")[0]: true}
		for _, name := range lines[2:] {
			if !allowed[name] {
				t.Errorf("the jail's / holds %q: %q", name, content)
			}
		}
		// As examples/README.md says: the mount root's path is made in the
		// agent's root/ as a mountpoint, and stays there, empty.
		made := s.mnt("home/1000/agent/shell/root") + s.root
		if ents, err := os.ReadDir(made); err != nil || len(ents) != 0 {
			t.Errorf("the mount root's path in the agent's root/: %v %v", ents, err)
		}
	})

	t.Run("long output", func(t *testing.T) {
		frames := exSend(t, s, jailUser, "shell", "long", "l1", "seq 1 30000")
		content, _ := exFrame(t, frames, "tool_result")["content"].(string)
		note := "\n[output truncated to its first 65536 bytes]\n"
		if !strings.HasPrefix(content, "1\n2\n3\n") || !strings.HasSuffix(content, note) || len(content) != 65536+len(note) {
			t.Errorf("truncated output: %d bytes, ends %q", len(content), lastLines(content, 2))
		}
		exJSONLines(t, filepath.Join(sessDir("long"), "messages.jsonl"))
	})

	t.Run("ctx send and chat", func(t *testing.T) {
		out, err := runCmd(t, jailUser, []string{"CTX_ROOT=" + s.root}, ctxBin, "agent", "send", "shell", "echo hello; ls /bin/sh")
		if err != nil || out != "hello\n/bin/sh\n" {
			t.Errorf("ctx agent send: %v %q", err, out)
		}
		out, err = bashAs(t, jailUser, fmt.Sprintf("printf 'echo one\\npwd\\n' | CTX_ROOT=%s %s agent chat shell --session chat", s.root, ctxBin))
		if err != nil || !strings.Contains(out, "one\n") || !strings.Contains(out, "/\n") {
			t.Errorf("ctx agent chat: %v %q", err, out)
		}
		msgs := exJSONLines(t, filepath.Join(sessDir("chat"), "messages.jsonl"))
		if len(msgs) != 6 {
			t.Errorf("the chat recorded %d messages, want 6 (two of user, tool, assistant)", len(msgs))
		}
	})
}

// TestExamplePrepareRootRefuses: prepare-root.sh refuses a bad uid or
// agent name, and an R that nothing serves, writing nothing.
func TestExamplePrepareRootRefuses(t *testing.T) {
	requireFUSE(t)
	exRequireBusybox(t)
	s := newFuseServer(t)
	for _, args := range [][]string{{"--root", s.root, "x", "shell"}, {"--root", s.root, "1000", "../x"}, {"--root", s.root, "1000", "x.d"}, {"--root", s.root, "1000"}} {
		if out, code := exScript(t, "shell-agent/prepare-root.sh", args...); code == 0 {
			t.Errorf("prepare-root.sh %q succeeded:\n%s", args, out)
		}
	}
	if _, err := os.Stat(s.mnt("home/1000")); !os.IsNotExist(err) {
		t.Errorf("a refused prepare-root.sh made home/1000: %v", err)
	}
	plain := t.TempDir()
	out, code := exScript(t, "shell-agent/prepare-root.sh", "--root", plain, "1000", "shell")
	if code == 0 || !strings.Contains(out, "nothing is mounted") {
		t.Errorf("prepare-root.sh on an unmounted root: exit %d\n%s", code, out)
	}
	if ents, _ := os.ReadDir(plain); len(ents) != 0 {
		t.Errorf("prepare-root.sh wrote into an unmounted root: %v", ents)
	}
}

// TestExampleWrapAgent: wrap-agent makes a text agent of a real command
// with its arguments quoted exactly, and refuses bad names and existing
// agents without writing anything.
func TestExampleWrapAgent(t *testing.T) {
	s := newFuseServer(t)
	wrap := "text-wrapper/wrap-agent"
	agents := filepath.Join(s.root, "agent")

	exMustScript(t, wrap, "--root", s.root, "upper", "tr", "a-z", "A-Z")
	for f, want := range map[string]string{"abi": "text\n", "isolation": "none\n"} {
		if got := fileBytes(t, filepath.Join(agents, "upper.d", f)); got != want {
			t.Errorf("upper.d/%s = %q, want %q", f, got, want)
		}
	}
	exWaitSocket(t, s, "upper")
	frames := exSend(t, s, jailUser, "upper", "u", "u1", "hello, World ü\n")
	if got := exAnswer(t, frames); got != "HELLO, WORLD ü\n" || frames[len(frames)-1]["status"] != "ok" {
		t.Errorf("upper answered %q: %v\nlog:\n%s", got, frames, s.logText())
	}

	args := []string{"[%s]", "a b", "it's", `"q"`, `back\slash`, "$HOME", "`id`", "$(id)", "t\tn\n", "ü", "*", ""}
	exMustScript(t, wrap, append([]string{"--root", s.root, "pf", "printf"}, args...)...)
	exWaitSocket(t, s, "pf")
	want := ""
	for _, a := range args[1:] {
		want += "[" + a + "]"
	}
	if got := exAnswer(t, exSend(t, s, jailUser, "pf", "p", "p1", "ignored")); got != want {
		t.Errorf("printf agent answered %q, want %q", got, want)
	}

	before := exTree(t, agents)
	bad := []string{"-x", ".hidden", "_x", "+x", "a/b", "x.d", "x.sock", ".", "..", strings.Repeat("a", 65), "é", "a b", "a\nb", "a*"}
	for _, name := range bad {
		out, code := exScript(t, wrap, "--root", s.root, name, "cat")
		if code == 0 {
			t.Errorf("wrap-agent accepted the name %q:\n%s", name, out)
		}
	}
	out, code := exScript(t, wrap, "--root", s.root, "upper", "cat")
	if code == 0 || !strings.Contains(out, "--force") {
		t.Errorf("wrap-agent replaced an existing agent: exit %d\n%s", code, out)
	}
	if after := exTree(t, agents); after != before {
		t.Errorf("refused wrap-agent runs changed %s:\nbefore:\n%s\nafter:\n%s", agents, before, after)
	}
	testkit.Must(t, os.MkdirAll(filepath.Join(agents, "only.d"), 0o755))
	exWaitSocket(t, s, "only")
	before = exTree(t, agents)
	if out, code := exScript(t, wrap, "--root", s.root, "only", "cat"); code == 0 {
		t.Errorf("wrap-agent took over an existing only.d:\n%s", out)
	}
	if out, code := exScript(t, wrap, "--root", s.root, "ghost", "no-such-command-here"); code == 0 {
		t.Errorf("wrap-agent accepted a missing command:\n%s", out)
	}
	if after := exTree(t, agents); after != before {
		t.Errorf("refused wrap-agent runs changed %s:\nbefore:\n%s\nafter:\n%s", agents, before, after)
	}

	// A name at the limit of the rule is taken; --force replaces the
	// program and keeps the definition's other files.
	long := "A0" + strings.Repeat("z", 58) + ".+_-"
	exMustScript(t, wrap, "--root", s.root, long, "cat")
	testkit.Must(t, os.WriteFile(filepath.Join(agents, "upper.d", "AGENTS.md"), []byte("keep me\n"), 0o644))
	exMustScript(t, wrap, "--root", s.root, "--force", "upper", "cat")
	if got := fileBytes(t, filepath.Join(agents, "upper.d", "AGENTS.md")); got != "keep me\n" {
		t.Errorf("--force lost upper.d/AGENTS.md: %q", got)
	}
	if got := exAnswer(t, exSend(t, s, jailUser, "upper", "u", "u2", "now as it is\n")); got != "now as it is\n" {
		t.Errorf("the replaced upper answered %q", got)
	}
}

// exProvider is an HTTP server that speaks both providers' streaming
// formats and records what it was asked.
type exProvider struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []exProviderReq
}

type exProviderReq struct {
	path string
	hdr  http.Header
	body map[string]any
}

func newExProvider(t *testing.T, reply string) *exProvider {
	p := &exProvider{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		json.Unmarshal(b, &body)
		p.mu.Lock()
		p.reqs = append(p.reqs, exProviderReq{r.URL.Path, r.Header.Clone(), body})
		p.mu.Unlock()
		text, _ := json.Marshal(reply)
		var events []string
		switch r.URL.Path {
		case "/v1/chat/completions":
			events = []string{
				`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":` + string(text) + `}}]}`,
				`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
				`data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`,
				`data: [DONE]`}
		case "/v1/messages":
			events = []string{
				"event: message_start\ndata: " + `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":9,"output_tokens":1}}}`,
				"event: content_block_start\ndata: " + `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				"event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":` + string(text) + `}}`,
				"event: content_block_stop\ndata: " + `{"type":"content_block_stop","index":0}`,
				"event: message_delta\ndata: " + `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`,
				"event: message_stop\ndata: " + `{"type":"message_stop"}`}
		default:
			http.Error(w, "no such path "+r.URL.Path, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			fmt.Fprint(w, e+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(p.Server.Close)
	return p
}

func (p *exProvider) take() []exProviderReq {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.reqs
	p.reqs = nil
	return r
}

// exModelSend sends one request to a model's own socket as root.
func exModelSend(t *testing.T, s *server, model, input string) []frame {
	t.Helper()
	sock := filepath.Join(s.root, "model", model+".sock")
	eventually(t, 5*time.Second, "the socket "+sock, func() bool { _, err := os.Stat(sock); return err == nil })
	conn, err := net.Dial("unix", sock)
	testkit.Must(t, err)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	req, _ := json.Marshal(map[string]string{"op": "send", "id": "m1", "input": input})
	_, err = conn.Write(append(req, '\n'))
	testkit.Must(t, err)
	var frames []frame
	sc := bufio.NewScanner(conn)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var f frame
		testkit.Must(t, json.Unmarshal(sc.Bytes(), &f))
		frames = append(frames, f)
	}
	return frames
}

// TestExampleModels: the example model definitions, copied as they ship
// into R/model with only their endpoints' host moved to a local provider,
// answer: the assistant agent through ollama/llama3.2, and the openai and
// anthropic models at their own sockets with their keys from the server's
// environment; no key lands in the store.
func TestExampleModels(t *testing.T) {
	requireFUSE(t)
	const reply = "hi from the example"
	keys := map[string]string{"OPENAI_API_KEY": "sk-example-openai-4b1d", "ANTHROPIC_API_KEY": "sk-example-anthropic-9c2e"}
	p := newExProvider(t, reply)
	fake, err := url.Parse(p.URL)
	testkit.Must(t, err)
	models := filepath.Join(exDir(t), "models")
	s := newServerWith(t, func(s *server) {
		for k, v := range keys {
			s.env = append(s.env, k+"="+v)
		}
		for _, provider := range []string{"ollama", "openai", "anthropic"} {
			testkit.Must(t, os.CopyFS(filepath.Join(s.root, "model", provider), os.DirFS(filepath.Join(models, provider))))
		}
		testkit.Must(t, os.CopyFS(filepath.Join(s.root, "agent", "assistant.d"), os.DirFS(filepath.Join(models, "assistant.d"))))
		eps, _ := filepath.Glob(filepath.Join(s.root, "model", "*", "*.d", "endpoint"))
		if len(eps) != 3 {
			t.Fatalf("endpoints %v, want 3", eps)
		}
		for _, ep := range eps {
			u, err := url.Parse(strings.TrimSpace(fileBytes(t, ep)))
			testkit.Must(t, err)
			u.Scheme, u.Host = fake.Scheme, fake.Host
			testkit.Must(t, os.WriteFile(ep, []byte(u.String()+"\n"), 0o644))
		}
	})

	exWaitSocket(t, s, "assistant")
	frames := exSend(t, s, nil, "assistant", "default", "a1", "hello?")
	if got := exAnswer(t, frames); got != reply || frames[len(frames)-1]["status"] != "ok" {
		t.Fatalf("assistant answered %q: %v\nlog:\n%s", got, frames, s.logText())
	}
	reqs := p.take()
	if len(reqs) != 1 {
		t.Fatalf("%d requests to the provider", len(reqs))
	}
	r := reqs[0]
	msgs, _ := json.Marshal(r.body["messages"])
	rule := strings.TrimSpace(fileBytes(t, filepath.Join(models, "assistant.d/AGENTS.md")))
	if r.path != "/v1/chat/completions" || r.body["model"] != "llama3.2" || r.hdr.Get("Authorization") != "" ||
		!strings.Contains(string(msgs), rule) || !strings.Contains(string(msgs), "hello?") {
		t.Errorf("ollama request: %s %v %s auth %q", r.path, r.body["model"], msgs, r.hdr.Get("Authorization"))
	}

	for _, c := range []struct{ model, path, id, key, header, value string }{
		{"openai/gpt-4o-mini", "/v1/chat/completions", "gpt-4o-mini", "OPENAI_API_KEY", "Authorization", "Bearer " + keys["OPENAI_API_KEY"]},
		{"anthropic/claude-sonnet", "/v1/messages", "claude-sonnet-4-5", "ANTHROPIC_API_KEY", "x-api-key", keys["ANTHROPIC_API_KEY"]},
	} {
		frames := exModelSend(t, s, c.model, "hello?")
		if got := exAnswer(t, frames); got != reply || frames[len(frames)-1]["status"] != "ok" {
			t.Errorf("%s answered %q: %v\nlog:\n%s", c.model, got, frames, s.logText())
			continue
		}
		reqs := p.take()
		if len(reqs) != 1 {
			t.Fatalf("%s: %d requests", c.model, len(reqs))
		}
		r := reqs[0]
		if r.path != c.path || r.body["model"] != c.id || r.hdr.Get(c.header) != c.value {
			t.Errorf("%s request: %s model %v %s %q", c.model, r.path, r.body["model"], c.header, r.hdr.Get(c.header))
		}
		if c.model == "anthropic/claude-sonnet" && r.body["max_tokens"] != 4096.0 {
			t.Errorf("%s max_tokens %v, want 4096", c.model, r.body["max_tokens"])
		}
	}

	// No key is in any file of the store, nor in an example definition.
	for _, dir := range []string{s.store, models} {
		filepath.Walk(dir, func(p string, st os.FileInfo, err error) error {
			if err != nil || !st.Mode().IsRegular() {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, k := range keys {
				if strings.Contains(string(b), k) {
					t.Errorf("%s holds an API key", p)
				}
			}
			return nil
		})
	}
}
