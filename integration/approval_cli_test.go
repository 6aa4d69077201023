package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// toolModel is an OpenAI-compatible model that calls a tool for a user
// message that names one ("write": fs_write, "ask": ask_user) and answers
// "done: RESULT" once the call's result comes back, when its gate lets it:
// until then the run stays live. Call ids differ from turn to turn, as a
// real model's do (a history with one id twice has its calls sent as text).
type toolModel struct {
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

// hold keeps the answers to results back until release.
func (m *toolModel) hold() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gate = make(chan struct{})
}

func (m *toolModel) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gate != nil {
		close(m.gate)
		m.gate = nil
	}
}

func (m *toolModel) reply(w http.ResponseWriter, r *http.Request, body map[string]any) {
	msgs, _ := body["messages"].([]any)
	last, _ := msgs[len(msgs)-1].(map[string]any)
	content := fmt.Sprint(last["content"])
	switch {
	case last["role"] == "tool":
		m.mu.Lock()
		gate := m.gate
		m.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		openAIReply("done: "+content)(w, r)
	case strings.Contains(content, "ask"):
		streamToolCall(w, fmt.Sprint("call_q", len(msgs)), "ask_user", `{"text":"which branch?"}`)
	case strings.Contains(content, "write"):
		streamToolCall(w, fmt.Sprint("call_w", len(msgs)), "fs_write", `{"path":"notes.txt","content":"hi"}`)
	default:
		openAIReply("hello")(w, r)
	}
}

// streamToolCall streams one tool call, as OpenAI does: the call's id and
// name, then its arguments, then finish_reason tool_calls.
func streamToolCall(w http.ResponseWriter, id, name, args string) {
	sse(w,
		`data: {"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"`+id+`","type":"function","function":{"name":"`+name+`","arguments":""}}]}}]}`,
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":`+jsonString(args)+`}}]}}]}`,
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
		`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`,
		`data: [DONE]`)
}

// newApprovalServer starts a mounted server with the agent "writer": a
// toolModel behind the openai-chat API, the tools fs.write and ask_user,
// approval ask.
func newApprovalServer(t *testing.T) (*server, *toolModel) {
	t.Helper()
	configure, m := approvalAgent(t)
	return newFuseServerWith(t, configure), m
}

// approvalAgent is the configuration of newApprovalServer: the fake
// model and the agent "writer".
func approvalAgent(tb testing.TB) (func(*server), *toolModel) {
	var p *fakeProvider
	m := &toolModel{}
	tb.Cleanup(m.release)
	p = newFakeProvider(tb, func(w http.ResponseWriter, r *http.Request) {
		body, _ := p.last()
		m.reply(w, r, body)
	})
	return func(s *server) {
		s.env = append(s.env, "FAKE_PROVIDER_KEY="+apiKey)
		d := filepath.Join(s.root, "model", "fake", "llm.d")
		testkit.Must(tb, os.MkdirAll(d, 0o755))
		for f, v := range map[string]string{"api": "openai-chat", "endpoint": p.URL + "/v1", "model_id": "llm-7b", "api_key_env": "FAKE_PROVIDER_KEY"} {
			testkit.Must(tb, os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644))
		}
		s.define("writer", map[string]string{"model": "fake/llm", "tools": "fs.write\nask_user\n", "perm": "rw", "approval": "ask\n"})
	}, m
}

// hintRE is the command send shows beside a request nobody answered.
var hintRE = regexp.MustCompile(`ctx agent (approve|answer) writer (ctx-[0-9a-f]{32}) (\S+)`)

// hintFlags are the flags of the hint that name the session's space.
var hintFlags = regexp.MustCompile(`--shared \S+`)

// waitHint waits until p's stderr shows the command that answers a
// waiting call, and returns its run and call id.
func (p *ctxProc) waitHint(verb string) (run, call string) {
	p.t.Helper()
	waitUntil(p.t, cmdLimit, func() bool {
		m := hintRE.FindStringSubmatch(p.stderr())
		return m != nil && m[1] == verb
	}, func() string { return "no hint; " + p.printed() })
	m := hintRE.FindStringSubmatch(p.stderr())
	return m[2], m[3]
}

// result waits for p's end: its stdout, stderr and exit status.
func (p *ctxProc) result() (stdout, stderr string, code int) {
	p.t.Helper()
	code = p.exitCode()
	return p.stdout(), p.stderr(), code
}

// eventsOf is the bytes of a private session's events.jsonl in the store.
func (s *server) eventsOf(uid int, agent, session string) []byte {
	b, err := os.ReadFile(filepath.Join(s.sessionDir(uid, agent, session), "events.jsonl"))
	testkit.Must(s.t, err)
	return b
}

// A run of uid 1001 waits for approval: send shows the command that
// answers it, pending lists it for 1001 only; 1002's answer is EACCES and
// records nothing; a wrong call id is ENOENT; 1001's deny is recorded and
// the run goes on ("denied" is the tool's result); a second answer is
// EALREADY. Then a question, answered with ctx agent answer.
func TestApprovalCLIPendingApproveAnswer(t *testing.T) {
	s, model := newApprovalServer(t)
	model.hold() // the run stays live after the answer: its answers are remembered (EALREADY)
	send := startCtxAs(t, s, uid1001, "agent", "send", "writer", "please write")
	run, call := send.waitHint("approve")
	if !strings.Contains(send.stderr(), `waits for approval of fs.write {"path":"notes.txt","content":"hi"}`) {
		t.Errorf("send's stderr: %q", send.stderr())
	}

	out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "pending")
	want := "writer\tdefault\t" + run + "\t" + call + "\tapproval\tfs.write\t{\"path\":\"notes.txt\",\"content\":\"hi\"}\n"
	if out != want || errs != "" || code != 0 {
		t.Fatalf("pending as 1001: %q %q %d, want %q", out, errs, code, want)
	}
	out, _, code = ctxSplitAs(t, s, uid1001, "agent", "pending", "writer", "--json")
	var pf map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &pf) != nil || pf["run"] != run || pf["kind"] != "approval" || pf["agent"] != "writer" {
		t.Errorf("pending --json: %q (%d)", out, code)
	}
	if out, errs, code := ctxSplitAs(t, s, uid1002, "agent", "pending"); out != "" || errs != "" || code != 0 {
		t.Errorf("pending as 1002: %q %q %d, want nothing", out, errs, code)
	}

	before := s.eventsOf(1001, "writer", "default")
	_, errs, code = ctxSplitAs(t, s, uid1002, "agent", "approve", "writer", run, call)
	if code != 2 || !strings.HasPrefix(errs, "ctx: approve: EACCES") {
		t.Errorf("approve as 1002: %q %d, want EACCES exit 2", errs, code)
	}
	_, errs, code = ctxSplitAs(t, s, uid1001, "agent", "approve", "writer", run, "call_nope")
	if code != 2 || !strings.HasPrefix(errs, "ctx: approve: ENOENT") {
		t.Errorf("approve of another call: %q %d, want ENOENT exit 2", errs, code)
	}
	if after := s.eventsOf(1001, "writer", "default"); !bytes.Equal(before, after) {
		t.Errorf("refused answers wrote to events.jsonl:\n%s", after[len(before):])
	}

	out, errs, code = ctxSplitAs(t, s, uid1001, "agent", "approve", "writer", run, call, "--deny", "--reason", "not now")
	if want := "fs.write denied (not now): call " + call + " of run " + run + "\n"; out != want || errs != "" || code != 0 {
		t.Fatalf("approve --deny: %q %q %d, want %q", out, errs, code, want)
	}
	_, errs, code = ctxSplitAs(t, s, uid1001, "agent", "approve", "writer", run, call)
	if code != 2 || !strings.HasPrefix(errs, "ctx: approve: EALREADY") {
		t.Errorf("second answer: %q %d, want EALREADY exit 2", errs, code)
	}
	model.release()
	out, errs, code = send.result()
	if code != 0 || !strings.Contains(out, "denied: not now") {
		t.Errorf("send after the deny: %q %q %d", out, errs, code)
	}
	if ev := string(s.eventsOf(1001, "writer", "default")); !strings.Contains(ev, `"decision":"deny","uid":1001,"reason":"not now"`) {
		t.Errorf("no approval_result recorded:\n%s", ev)
	}
	// attach replays the record: a request answered long ago gets no
	// command that would answer it.
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "attach", "writer", run); code != 0 || errs != "" || !strings.Contains(out, "denied: not now") {
		t.Errorf("attach to the finished run: %q %q %d", out, errs, code)
	}

	send = startCtxAs(t, s, uid1001, "agent", "send", "writer", "ask me")
	run, call = send.waitHint("answer")
	attach := startCtxAs(t, s, uid1001, "agent", "attach", "writer", run)
	if r, c := attach.waitHint("answer"); r != run || c != call {
		t.Errorf("attach while the question waits shows %s %s, want %s %s", r, c, run, call)
	}
	out, _, _ = ctxSplitAs(t, s, uid1001, "agent", "pending")
	if !strings.Contains(out, "\t"+run+"\t"+call+"\tquestion\t-\twhich branch?\n") {
		t.Errorf("pending question: %q", out)
	}
	_, errs, code = ctxSplitAs(t, s, uid1002, "agent", "answer", "writer", run, call, "evil")
	if code != 2 || !strings.HasPrefix(errs, "ctx: answer: EACCES") {
		t.Errorf("answer as 1002: %q %d", errs, code)
	}
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "answer", "writer", run, call, "the", "main", "branch"); code != 0 || errs != "" {
		t.Fatalf("answer: %q %q %d", out, errs, code)
	}
	for _, p := range []*ctxProc{send, attach} {
		if out, errs, code := p.result(); code != 0 || !strings.Contains(out, "done: the main branch") {
			t.Errorf("ctx %q after the answer: %q %q %d", p.cmd.Args[1:], out, errs, code)
		}
	}
	if out, _, _ := ctxSplitAs(t, s, uid1001, "agent", "pending"); out != "" {
		t.Errorf("pending after the answers: %q", out)
	}
}

// send --approve fs.write answers the approval itself (allow once, as the
// sender) and shows no hint; the decision is recorded.
func TestApprovalCLISendApproves(t *testing.T) {
	s, _ := newApprovalServer(t)
	out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "send", "writer", "--approve", "fs.write", "please write")
	if code != 0 || strings.Contains(errs, "ctx agent approve") || !strings.Contains(out, "done: ") {
		t.Fatalf("send --approve: %q %q %d", out, errs, code)
	}
	if ev := string(s.eventsOf(1001, "writer", "default")); !strings.Contains(ev, `"decision":"allow_once","uid":1001`) {
		t.Errorf("no allow_once recorded:\n%s", ev)
	}
}

// chat at a terminal asks when a run waits: a key allows the call once,
// another key denies it, Ctrl+C at the prompt cancels the run, a question
// is answered as a line. The keys are what the person typed after the
// prompt; the decisions are recorded as root's.
func TestChatAnswersOnTerminal(t *testing.T) {
	s, _ := newApprovalServer(t)
	c := startChat(t, s, "writer")
	c.expect("writer> ")

	c.keys("please write\r")
	c.expect(`writer wants to run fs.write {"path":"notes.txt","content":"hi"}`)
	c.expect("[a/r/d/s] ")
	c.modeIs("at the approval prompt", 0) // raw: one key, no echo, Ctrl+C a key
	c.keys("x")                           // not an answer: ignored
	c.keys("a")
	c.expect("allow_once")
	c.expect("✓ fs.write allowed once")
	c.expect("done: ")
	c.expect("writer> ")

	c.keys("please write\r")
	c.expect("[a/r/d/s] ")
	c.keys("d")
	c.expect("✗ fs.write denied")
	c.expect("done: ")
	c.expect("writer> ")

	c.keys("please write\r")
	c.expect("[a/r/d/s] ")
	c.keys("\x03")
	c.expect("cancelled run ")
	c.expect("writer> ")

	c.keys("ask me\r")
	c.expect("writer asks:")
	c.expect("which branch?")
	c.expect("answer> ")
	c.keys("main\r")
	c.expect("» answered: main")
	c.expect("done: main")
	c.expect("writer> ")
	c.ctrlD()
	c.restored("after the chat")

	ev := string(s.eventsOf(0, "writer", "default"))
	for _, want := range []string{`"decision":"allow_once","uid":0`, `"decision":"deny","uid":0`, `"type":"answer","run":`, `"text":"main"`} {
		if !strings.Contains(ev, want) {
			t.Errorf("events.jsonl lacks %s:\n%s", want, ev)
		}
	}
}

// In a shared session only the run's requester may answer, not another
// member of the space (EACCES, nothing recorded); pending shows the
// session as SPACE/SESSION, and the command send shows answers it.
func TestApprovalCLISharedRequester(t *testing.T) {
	s, _ := newApprovalServer(t)
	s.spaceAdd("team", 1234)
	ann, bob := &cred{uid: 1001, gid: 1001, groups: []uint32{1234}}, &cred{uid: 1002, gid: 1002, groups: []uint32{1234}}
	send := startCtxAs(t, s, ann, "agent", "send", "writer", "--shared", "team", "--session", "t1", "please write")
	run, call := send.waitHint("approve")
	out, _, code := ctxSplitAs(t, s, ann, "agent", "pending")
	if code != 0 || !strings.HasPrefix(out, "writer\tteam/t1\t"+run+"\t"+call+"\t") {
		t.Errorf("pending as the requester: %q %d", out, code)
	}
	if out, _, _ := ctxSplitAs(t, s, bob, "agent", "pending"); out != "" {
		t.Errorf("pending as another member: %q", out)
	}
	events := filepath.Join(s.store, "shared/team/agent/writer/session/t1/events.jsonl")
	before, err := os.ReadFile(events)
	testkit.Must(t, err)
	hint := hintRE.FindString(send.stderr())
	args := strings.Fields(strings.TrimPrefix(hint, "ctx "))
	args = append(args, strings.Fields(hintFlags.FindString(send.stderr()))...)
	_, errs, code := ctxSplitAs(t, s, bob, args...)
	if code != 2 || !strings.HasPrefix(errs, "ctx: approve: EACCES") {
		t.Errorf("another member's answer: %q %d, want EACCES", errs, code)
	}
	if after, _ := os.ReadFile(events); !bytes.Equal(before, after) {
		t.Errorf("a refused answer wrote to events.jsonl:\n%s", after[len(before):])
	}
	if out, errs, code := ctxSplitAs(t, s, ann, args...); code != 0 {
		t.Fatalf("the requester's answer (%q): %q %q %d", args, out, errs, code)
	}
	if out, errs, code := send.result(); code != 0 {
		t.Errorf("send: %q %q %d", out, errs, code)
	}
}

// A call that waits when the server is killed still waits after the
// restart: pending lists it, approve continues the run under its id (a
// resumed event), and the store is fsck-clean.
func TestApprovalCLIAfterRestart(t *testing.T) {
	s, _ := newApprovalServer(t)
	send := startCtxAs(t, s, uid1001, "agent", "send", "writer", "please write")
	run, call := send.waitHint("approve")
	s.restart(syscall.SIGKILL)
	send.result() // its connection died with the server

	out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "pending", "writer")
	if code != 0 || !strings.HasPrefix(out, "writer\tdefault\t"+run+"\t"+call+"\tapproval\tfs.write\t") {
		t.Fatalf("pending after the restart: %q %q %d", out, errs, code)
	}
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "approve", "writer", run, call); code != 0 {
		t.Fatalf("approve after the restart: %q %q %d", out, errs, code)
	}
	eventually(t, cmdLimit, "the resumed run's done", func() bool {
		return strings.Contains(string(s.eventsOf(1001, "writer", "default")), `{"type":"done","run":"`+run+`","status":"ok"`)
	})
	ev := string(s.eventsOf(1001, "writer", "default"))
	for _, want := range []string{`{"type":"resumed","run":"` + run + `"`, `"decision":"allow_once","uid":1001`} {
		if !strings.Contains(ev, want) {
			t.Errorf("events.jsonl lacks %s:\n%s", want, ev)
		}
	}
	if out, _, _ := ctxSplitAs(t, s, uid1001, "agent", "pending"); out != "" {
		t.Errorf("pending after the answer: %q", out)
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: %d\n%s", code, out)
	}
}
