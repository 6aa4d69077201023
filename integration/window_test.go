package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SPEC 18: the context window. The fake provider records each request;
// its estimate (the server's: one token per 3 ASCII bytes, 8 a message)
// must stay within the window less the reply's reserve.

// promptTokens is the server's estimate of a recorded openai-chat
// request's messages (agent/window: ASCII bytes / 3 rounded up, plus 8
// for each message and 8 for the request).
// A tool call counts its id, name and arguments, and 8; the tools
// offered count their JSON less the wire's framing of each
// ({"type":"function","function":{…}}, which the server counts as 8 a
// tool).
func promptTokens(body map[string]any) int {
	n := 8
	msgs, _ := body["messages"].([]any)
	for _, m := range msgs {
		text, _ := m.(map[string]any)["content"].(string)
		n += 8 + (len(text)+2)/3
		calls, _ := m.(map[string]any)["tool_calls"].([]any)
		for _, c := range calls {
			c := c.(map[string]any)
			fn := c["function"].(map[string]any)
			n += 8 + (len(c["id"].(string))+2)/3 + (len(fn["name"].(string))+2)/3 + (len(fn["arguments"].(string))+2)/3
		}
		if id, ok := m.(map[string]any)["tool_call_id"].(string); ok {
			n += (len(id) + 2) / 3
		}
	}
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		b, _ := json.Marshal(t)
		n += (len(b)+2)/3 - 10
	}
	return n
}

// messagesText is the recorded request's messages, joined.
func messagesText(body map[string]any) string {
	b, _ := json.Marshal(body["messages"])
	return string(b)
}

var summaryHead = regexp.MustCompile(`^<!-- ctxfs summary: cursor=(\d+) line-sha256=([0-9a-f]{16}) -->\n`)

// checkSummaryCursor reads context/summary.md and checks that its cursor
// names a line of messages.jsonl with that line's hash; it returns the
// summary's text and the cursor.
func checkSummaryCursor(t *testing.T, dir string) (string, int) {
	t.Helper()
	sum := fileBytes(t, filepath.Join(dir, "context", "summary.md"))
	m := summaryHead.FindStringSubmatch(sum)
	if m == nil {
		t.Fatalf("summary.md has no cursor line:\n%s", sum)
	}
	end, _ := strconv.Atoi(m[1])
	msgs := fileBytes(t, filepath.Join(dir, "messages.jsonl"))
	if end > len(msgs) || msgs[end-1] != '\n' {
		t.Fatalf("cursor %d is not a line end of messages.jsonl (%d bytes)", end, len(msgs))
	}
	line := msgs[strings.LastIndexByte(msgs[:end-1], '\n')+1 : end-1]
	h := sha256.Sum256([]byte(line))
	if hex.EncodeToString(h[:8]) != m[2] {
		t.Fatalf("cursor hash %s is not that of line %q", m[2], line)
	}
	return sum[len(m[0]):], end
}

// newWindowServer is newModelServer with the agent "small" (window 1000:
// the reply keeps 250, so a prompt holds at most 750 tokens) and files
// of its own.
func newWindowServer(t *testing.T, reply func(w http.ResponseWriter, r *http.Request), files map[string]string) (*server, *fakeProvider) {
	requireFUSE(t)
	p := newFakeProvider(t, reply)
	s := newServerWith(t, func(s *server) {
		defineFakeModel(t, s, "openai-chat", p.URL+"/v1", nil)
		def := map[string]string{"model": "fake/llm", "window": "1000\n"}
		for k, v := range files {
			if strings.HasPrefix(k, "compact.d/") { // programs: executable
				writeExec(t, filepath.Join(s.root, "agent", "small.d", k), v)
				continue
			}
			def[k] = v
		}
		s.define("small", def)
	})
	return s, p
}

func (s *server) askSmall(session, id, input string) []frame {
	s.t.Helper()
	return s.mustRequest("small", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":%q}`, id, session, input))
}

// question is a user input of about 100 tokens, numbered.
func question(i int) string { return fmt.Sprintf("question %02d %s", i, strings.Repeat("x", 290)) }

// TestWindowTruncate: a conversation longer than a small window is sent
// within it, newest turns kept; context/summary.md names the last message
// left out (its cursor a line end of messages.jsonl with that line's
// hash); compaction changes nothing of messages.jsonl (what was there
// stays byte for byte, the runs only append); a deleted summary is
// rebuilt; an input that cannot fit alone is E2BIG.
func TestWindowTruncate(t *testing.T) {
	s, p := newWindowServer(t, openAIReply("ok"), nil)
	dir := s.sessionDir(0, "small", "long")
	var before string
	for i := 1; i <= 12; i++ {
		if i == 12 {
			before = fileBytes(t, filepath.Join(dir, "messages.jsonl"))
		}
		frames := s.askSmall("long", fmt.Sprint("q", i), question(i))
		if frames[len(frames)-1]["status"] != "ok" {
			t.Fatalf("send %d: %v\nlog:\n%s", i, frames, s.logText())
		}
		body, _ := p.last()
		if n := promptTokens(body); n > 750 {
			t.Fatalf("request %d holds about %d tokens, more than 750: %s", i, n, messagesText(body))
		}
	}
	body, _ := p.last()
	text := messagesText(body)
	if strings.Contains(text, "question 01") || !strings.Contains(text, "question 12") || !strings.Contains(text, "[summary of earlier conversation]") {
		t.Fatalf("last request: %s", text)
	}
	after := fileBytes(t, filepath.Join(dir, "messages.jsonl"))
	if !strings.HasPrefix(after, before) || strings.Count(after[len(before):], "\n") != 2 {
		t.Fatalf("messages.jsonl changed beyond the last run's two lines:\nbefore %q\nafter  %q", before, after)
	}
	if strings.Contains(after, "summary") {
		t.Fatal("the summary went into messages.jsonl")
	}
	_, cursor := checkSummaryCursor(t, dir)
	if cursor <= 0 || cursor >= len(after) {
		t.Fatalf("cursor %d", cursor)
	}

	// Missing: rebuilt at the next compaction, from the conversation.
	mustRemove(t, filepath.Join(dir, "context", "summary.md"))
	s.askSmall("long", "q13", question(13))
	if body, _ := p.last(); promptTokens(body) > 750 {
		t.Fatalf("after the summary was removed: %s", messagesText(body))
	}
	checkSummaryCursor(t, dir)

	// Too large alone: E2BIG, nothing sent.
	hits := p.hits()
	frames := s.askSmall("long", "big", strings.Repeat("y", 3000))
	if errorCode(frames) != "E2BIG" || frames[len(frames)-1]["status"] != "error" || p.hits() != hits {
		t.Fatalf("an input larger than the window: %v (requests %d → %d)", frames, hits, p.hits())
	}
}

func mustRemove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

// TestWindowSummarize: with compact.strategy summarize the server asks
// the same model for a summary (one request, with the turns cut), keeps
// its reply in context/summary.md and sends it before the newest turns.
func TestWindowSummarize(t *testing.T) {
	s, p := newWindowServer(t, func(w http.ResponseWriter, r *http.Request) {}, map[string]string{"compact.strategy": "summarize\n"})
	summaries := 0
	p.mu.Lock()
	p.reply = func(w http.ResponseWriter, r *http.Request) {
		body, _ := p.last()
		if strings.Contains(messagesText(body), "You condense conversations") {
			p.mu.Lock()
			summaries++
			p.mu.Unlock()
			openAIReply("SUMMARY: the user asked numbered questions")(w, r)
			return
		}
		openAIReply("ok")(w, r)
	}
	p.mu.Unlock()
	dir := s.sessionDir(0, "small", "sum")
	for i := 1; i <= 10; i++ {
		s.askSmall("sum", fmt.Sprint("q", i), question(i))
	}
	p.mu.Lock()
	n := summaries
	var summaryReq map[string]any
	for _, b := range p.bodies {
		if strings.Contains(messagesText(b), "You condense conversations") {
			summaryReq = b
			break
		}
	}
	p.mu.Unlock()
	if n == 0 || !strings.Contains(messagesText(summaryReq), "question 01") {
		t.Fatalf("no summary request with the oldest turns (%d): %v", n, summaryReq)
	}
	body, _ := p.last()
	if text := messagesText(body); !strings.Contains(text, "[summary of earlier conversation]\\nSUMMARY: the user asked") || strings.Contains(text, "question 01") || promptTokens(body) > 750 {
		t.Fatalf("last request: %s", text)
	}
	if text, _ := checkSummaryCursor(t, dir); text != "SUMMARY: the user asked numbered questions" {
		t.Fatalf("summary.md text %q", text)
	}
}

// TestWindowStrategyProgram: a compact.d/ program reads the turns as JSON
// and prints the summary, as the session's uid; one that hangs is killed
// at its time bound (the definition's timeout, 2 s), so is one whose
// child left its group holding stdout, and one that prints more than a
// summary may hold is cut off: the run is answered all the
// same, by truncation, the old summary kept, a log event saying why.
func TestWindowStrategyProgram(t *testing.T) {
	s, p := newWindowServer(t, openAIReply("ok"), map[string]string{"compact.strategy": "digest\n", "timeout": "2\n",
		"compact.d/digest": "#!/bin/sh\nin=$(cat)\necho \"digest by uid $(id -u) of $(printf %s \"$in\" | grep -o '\"role\"' | wc -l) turns\"\n",
		"compact.d/hang":   "#!/bin/sh\nsleep 60\n",
		"compact.d/loud":   "#!/bin/sh\nhead -c 100000 /dev/zero | tr '\\0' 'z'\n",
		"compact.d/escape": "#!/bin/sh\nsetsid sleep 6 &\necho partial\n"})
	dir := s.sessionDir(0, "small", "prog")
	for i := 1; i <= 10; i++ {
		s.askSmall("prog", fmt.Sprint("q", i), question(i))
	}
	text, cursor := checkSummaryCursor(t, dir)
	if !regexp.MustCompile(`^digest by uid 0 of \d+ turns$`).MatchString(text) {
		t.Fatalf("summary %q", text)
	}
	for _, bad := range []string{"hang", "loud", "escape"} {
		testkitWrite(t, filepath.Join(s.root, "agent", "small.d", "compact.strategy"), bad+"\n")
		startHits, started := p.hits(), time.Now()
		var frames []frame
		var slowest time.Duration
		for i := 0; p.hits()-startHits < 6 && i < 6; i++ {
			sent := time.Now()
			frames = s.askSmall("prog", fmt.Sprint(bad, i), question(20+i))
			slowest = max(slowest, time.Since(sent))
			if frames[len(frames)-1]["status"] != "ok" {
				t.Fatalf("%s: the run was not answered: %v", bad, frames)
			}
		}
		body, _ := p.last()
		if promptTokens(body) > 750 {
			t.Fatalf("%s: request beyond the window", bad)
		}
		again, newCursor := checkSummaryCursor(t, dir)
		if again != text || newCursor <= cursor {
			t.Fatalf("%s: summary %q cursor %d (was %q at %d)", bad, again, newCursor, text, cursor)
		}
		cursor = newCursor
		events := fileBytes(t, filepath.Join(dir, "events.jsonl"))
		want := map[string]string{"hang": "ETIMEDOUT", "loud": "printed more than", "escape": "ETIMEDOUT"}[bad]
		if !strings.Contains(events, "compaction by "+bad+" failed") || !strings.Contains(events, want) {
			t.Fatalf("%s: no log event saying why:\n%s", bad, events)
		}
		if bad != "loud" && time.Since(started) > 50*time.Second {
			t.Fatal("the hanging strategy was not killed at its bound")
		}
		if bad == "escape" && slowest >= 5*time.Second { // its child holds stdout 6 s
			t.Fatalf("a send took %v: the read waited for the escaped child", slowest)
		}
	}
}

func writeExec(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

func testkitWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (s *server) askSmallAs(c *cred, session, id, input string) []frame {
	s.t.Helper()
	frames, _, err := s.requestAs(c, "small", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":%q}`, id, session, input))
	if err != nil || frames[len(frames)-1]["status"] != "ok" {
		s.t.Fatalf("send as %d: %v %v\nlog:\n%s", c.uid, frames, err, s.logText())
	}
	return frames
}

// TestWindowEnv: a program gets its window and compaction point in
// CTX_CONTEXT_WINDOW_TOKENS and CTX_CONTEXT_COMPACTION_TOKENS (window
// 5000, no max_tokens: the reply keeps 4,096, a compact of 700 is below
// what is left; its env file cannot set them: EINVAL at load, as every
// CTX_ name).
func TestWindowEnv(t *testing.T) {
	requireFUSE(t)
	s := newServerWith(t, func(s *server) {
		s.define("envy", map[string]string{"program": "#!/bin/sh\nenv\n", "abi": "text\n", "window": "5000\n", "compact": "700\n"})
	})
	frames, _, err := s.requestAs(owner, "envy", `{"op":"send","id":"e1","session":"e","input":"hi"}`)
	if err != nil {
		t.Fatal(err)
	}
	out := deltaText(frames)
	for _, f := range frames {
		if f["type"] == "message" {
			b, _ := json.Marshal(f)
			out += string(b)
		}
	}
	if !strings.Contains(out, "CTX_CONTEXT_WINDOW_TOKENS=5000") || !strings.Contains(out, "CTX_CONTEXT_COMPACTION_TOKENS=700") {
		t.Fatalf("env of the program: %s\n%v", out, frames)
	}
}

// TestWindowCompactOp: as the session's owner, the status op says how
// full the window is; the op compact folds every turn before the newest
// user turn into context/summary.md, written as the owner (never through
// a symlink the owner left there), and changes nothing of messages.jsonl;
// an agent run by a program has no window the server keeps (EINVAL).
func TestWindowCompactOp(t *testing.T) {
	s, _ := newWindowServer(t, openAIReply("ok"), nil)
	for i := 1; i <= 3; i++ {
		s.askSmallAs(owner, "w", fmt.Sprint("q", i), question(i))
	}
	status := func() map[string]any {
		frames, _, err := s.requestAs(owner, "small", `{"op":"status","session":"w"}`)
		if err != nil || len(frames) != 1 {
			t.Fatalf("status: %v %v", frames, err)
		}
		w, _ := frames[0]["window"].(map[string]any)
		if w["limit"] != 750.0 || w["compact_at"] != 750.0 || w["window"] != 1000.0 {
			t.Fatalf("status window %v", frames[0])
		}
		return w
	}
	full := status()["tokens"].(float64)
	if full < 300 || full > 750 {
		t.Fatalf("window tokens %v for three exchanges of about 100 tokens", full)
	}

	dir := s.sessionDir(1001, "small", "w")
	mount := filepath.Join(s.root, "home", "1001", "agent", "small", "session", "w", "context")
	if out, err := bashAs(t, owner, "cd "+mount+" && echo mine > target.txt && ln -s target.txt summary.md"); err != nil {
		t.Fatalf("symlink: %v %s", err, out)
	}
	msgs := fileBytes(t, filepath.Join(dir, "messages.jsonl"))
	compact := func() frame {
		frames, _, err := s.requestAs(owner, "small", `{"op":"compact","session":"w"}`)
		if err != nil || len(frames) != 1 || frames[0]["type"] != "compacted" {
			t.Fatalf("compact: %v %v\nlog:\n%s", frames, err, s.logText())
		}
		return frames[0]
	}
	compact()
	if got := fileBytes(t, filepath.Join(dir, "context", "target.txt")); got != "mine\n" {
		t.Fatalf("the summary was written through the owner's symlink: %q", got)
	}
	if st, err := os.Lstat(filepath.Join(dir, "context", "summary.md")); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("summary.md is no longer the owner's symlink: %v", err)
	}
	// A FIFO there: neither read nor written, and nothing waits on it.
	if out, err := bashAs(t, owner, "cd "+mount+" && rm summary.md && mkfifo summary.md"); err != nil {
		t.Fatalf("mkfifo: %v %s", err, out)
	}
	compact()
	if st, err := os.Lstat(filepath.Join(dir, "context", "summary.md")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("summary.md is no longer the owner's FIFO: %v", err)
	}
	mustRemove(t, filepath.Join(dir, "context", "summary.md"))
	f := compact()
	if f["kept_turns"] != 2.0 || f["strategy"] != "truncate" {
		t.Fatalf("compacted %v", f)
	}
	_, cursor := checkSummaryCursor(t, dir)
	if f["cursor"] != float64(cursor) {
		t.Fatalf("compacted cursor %v, summary.md's %d", f["cursor"], cursor)
	}
	if st, err := os.Stat(filepath.Join(dir, "context", "summary.md")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 1001 {
		t.Fatalf("summary.md not the owner's: %v", err)
	}
	if got := fileBytes(t, filepath.Join(dir, "messages.jsonl")); got != msgs {
		t.Fatal("compaction changed messages.jsonl")
	}
	if now := status()["tokens"].(float64); now >= full {
		t.Fatalf("window tokens %v after compaction, %v before", now, full)
	}
	if _, _, err := s.requestAs(owner, "coder", `{"op":"send","id":"c1","session":"w","input":"hi"}`); err != nil {
		t.Fatal(err)
	}
	frames, _, _ := s.requestAs(owner, "coder", `{"op":"compact","session":"w"}`)
	if errorCode(frames) != "EINVAL" {
		t.Fatalf("compact of a program's session: %v", frames)
	}
}

// TestWindowToolSteps: a run's own tool steps stay within the window too:
// before each request the oldest turns are cut (here within the run's
// steps, kept in the run's memory alone), never between a call and its
// result.
func TestWindowToolSteps(t *testing.T) {
	var replies []func(w http.ResponseWriter, r *http.Request)
	for i := 1; i <= 6; i++ {
		replies = append(replies, openAICall(fmt.Sprint("call_", i), "shell_exec", `{"argv":["sh","-c","head -c 600 /dev/zero | tr '\\0' r"]}`))
	}
	replies = append(replies, openAIReply("done"))
	s, p := newWindowServer(t, scripted(replies...), map[string]string{"tools": "shell.exec\n", "perm": "rx\n"})
	frames := s.askSmallAs(owner, "steps", "q", "run the command six times")
	if deltaText(frames) != "done" {
		t.Fatalf("run: %v", frames)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bodies) != 7 {
		t.Fatalf("%d requests, want 7", len(p.bodies))
	}
	for i, body := range p.bodies {
		if n := promptTokens(body); n > 750 {
			t.Fatalf("request %d holds about %d tokens: %s", i+1, n, messagesText(body))
		}
		msgs := body["messages"].([]any)
		for j, m := range msgs { // every result follows its call
			if m.(map[string]any)["role"] == "tool" && msgs[j-1].(map[string]any)["role"] != "assistant" && msgs[j-1].(map[string]any)["role"] != "tool" {
				t.Fatalf("request %d: a result without its call: %s", i+1, messagesText(body))
			}
		}
	}
	if last := messagesText(p.bodies[6]); strings.Contains(last, "call_1") || !strings.Contains(last, "call_6") || !strings.Contains(last, "[summary of earlier conversation]") {
		t.Fatalf("last request: %s", last)
	}
}

// TestWindowCompactBusy: the op compact is EBUSY while a run of the
// session is under way (the run keeps its own window), and nothing is
// written: no summary.md, messages.jsonl the same.
func TestWindowCompactBusy(t *testing.T) {
	release := make(chan struct{})
	s, p := newWindowServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		openAIReply("late")(w, r)
	}, nil)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	done := make(chan []frame, 1)
	go func() {
		frames, _, _ := s.requestAs(owner, "small", `{"op":"send","id":"slow","session":"busy","input":"wait for me"}`)
		done <- frames
	}()
	eventually(t, 10*time.Second, "the run's request at the provider", func() bool { return p.hits() == 1 })
	dir := s.sessionDir(1001, "small", "busy")
	msgs := fileBytes(t, filepath.Join(dir, "messages.jsonl"))
	frames, _, err := s.requestAs(owner, "small", `{"op":"compact","session":"busy"}`)
	if err != nil || errorCode(frames) != "EBUSY" {
		t.Fatalf("compact during a run: %v %v", frames, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "context", "summary.md")); !os.IsNotExist(err) {
		t.Fatalf("summary.md written: %v", err)
	}
	if fileBytes(t, filepath.Join(dir, "messages.jsonl")) != msgs {
		t.Fatal("messages.jsonl changed")
	}
	close(release)
	if f := <-done; deltaText(f) != "late" {
		t.Fatalf("the run: %v", f)
	}
}

// TestCompactProgramGetsNoServerDescriptor: a compact.d/ program runs as
// the session's uid with stdin, stdout and stderr alone: a descriptor the
// server inherited from whoever started it (here fd 7, a root-only file,
// opened for writing by the starting shell, without close-on-exec) is not
// handed on, so the user's program cannot write root's file through it.
func TestCompactProgramGetsNoServerDescriptor(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "root-only")
	if err := os.WriteFile(secret, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	requireFUSE(t)
	p := newFakeProvider(t, openAIReply("ok"))
	s := newServerWith(t, func(s *server) {
		s.wrap = []string{"sh", "-c", `exec 7<>"$0"; exec "$@"`, secret}
		defineFakeModel(t, s, "openai-chat", p.URL+"/v1", nil)
		s.define("small", map[string]string{"model": "fake/llm", "window": "1000\n", "compact.strategy": "fds\n"})
		writeExec(t, filepath.Join(s.root, "agent", "small.d", "compact.d", "fds"),
			"#!/bin/sh\ncat >/dev/null\necho written >&7\necho \"uid $(id -u) fds $(ls /proc/self/fd | tr '\\n' ' ')\"\n")
	})
	for i := 1; i <= 10; i++ {
		s.askSmallAs(owner, "fds", fmt.Sprint("q", i), question(i))
	}
	text, _ := checkSummaryCursor(t, s.sessionDir(int(owner.uid), "small", "fds"))
	if text != "uid 1001 fds 0 1 2 3" { // 3: ls's own listing of /proc/self/fd
		t.Errorf("the compact.d program saw %q, want only its stdio", text)
	}
	if got := fileBytes(t, secret); got != "root's\n" {
		t.Errorf("the program wrote root's file through the server's descriptor: %q", got)
	}
}

// TestCompactOpCountsAsRun: the op compact holds one of its caller's runs
// while its strategy works (a compact.d/ program is a process of the
// uid's, summarize a request to the provider, and each holds the
// session's prompt): with runs=2, two of six compactions at once work and
// the other four are EAGAIN at once, and the places are given back after.
// Before, nothing bounded them but the connections and open files a uid
// may have (64 and 1,024): every one ran its program at once.
func TestCompactOpCountsAsRun(t *testing.T) {
	p := newFakeProvider(t, openAIReply("ok"))
	s := limitedServer(t, "runs=2", func(s *server) {
		defineFakeModel(t, s, "openai-chat", p.URL+"/v1", nil)
		s.define("small", map[string]string{"model": "fake/llm", "window": "1000\n", "compact.strategy": "slow\n"})
		writeExec(t, filepath.Join(s.root, "agent", "small.d", "compact.d", "slow"), "#!/bin/sh\ncat >/dev/null\nsleep 5\necho slow\n")
	})
	for i := 1; i <= 3; i++ {
		s.askSmallAs(owner, "q", fmt.Sprint("q", i), question(i))
	}
	results := make(chan string, 6)
	for i := 0; i < 6; i++ {
		go func() {
			frames, _, err := s.requestAs(owner, "small", `{"op":"compact","session":"q"}`)
			switch {
			case err != nil || len(frames) != 1:
				results <- fmt.Sprintf("%v %v", frames, err)
			case frames[0]["type"] == "compacted":
				results <- "compacted"
			default:
				results <- errorCode(frames)
			}
		}()
	}
	counts := map[string]int{}
	for i := 0; i < 6; i++ {
		counts[<-results]++
	}
	if counts["compacted"] != 2 || counts["EAGAIN"] != 4 {
		t.Fatalf("six compactions at once with runs=2: %v, want 2 compacted and 4 EAGAIN", counts)
	}
	s.askSmallAs(owner, "q", "after", "one more") // both places were given back
	s.askSmallAs(owner, "q", "after2", "and one more")
}

// looseCalls appends to the messages.jsonl at argv[1] one assistant
// message of argv[2] calls of tool x (offered to no agent), with one write.
const looseCalls = `
import json, os, sys
calls = [{"type": "tool_call", "id": str(i), "name": "x", "arguments": {}} for i in range(int(sys.argv[2]))]
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
os.write(fd, (json.dumps({"role": "assistant", "content": calls}, separators=(",", ":")) + "\n").encode())
os.close(fd)
`

// TestManyLooseCallsSentInTime: an assistant message of many calls of a
// tool the run does not offer goes to the provider as text, each call a
// paragraph: they were appended to the text one at a time, each copying
// all before it, so one message of 17,000 calls (a line of 1 MiB, which
// the owner appends through the mount) took 2.2 s of the server's CPU at
// every request that held it, two 4.4 s. Now the request reaches the
// provider at once (0.2 s), the calls in it as text.
func TestManyLooseCallsSentInTime(t *testing.T) {
	requireFUSE(t)
	p := newFakeProvider(t, openAIReply("ok"))
	s := newServerWith(t, func(s *server) {
		defineFakeModel(t, s, "openai-chat", p.URL+"/v1", nil)
		s.define("wide", map[string]string{"model": "fake/llm", "window": "10000000\n"}) // nothing is cut
	})
	if _, _, err := s.requestAs(owner, "wide", `{"op":"send","id":"q1","session":"w","input":"hello"}`); err != nil {
		t.Fatal(err)
	}
	msgs := s.mnt("home/1001/agent/wide/session/w/messages.jsonl")
	for i := 0; i < 2; i++ {
		if out, err := runCmd(t, owner, nil, "/usr/bin/python3", "-c", looseCalls, msgs, "17000"); err != nil {
			t.Fatalf("append: %v %s", err, out)
		}
	}
	started := time.Now()
	frames, _, err := s.requestAs(owner, "wide", `{"op":"send","id":"q2","session":"w","input":"go on"}`)
	took := time.Since(started)
	if err != nil || deltaText(frames) != "ok" {
		t.Fatalf("send: %v %v", frames, err)
	}
	body, _ := p.last()
	if text := messagesText(body); !strings.Contains(text, "[tool call x (call 16999)]") {
		t.Fatalf("the calls are not in the request as text")
	}
	t.Logf("the send took %v", took)
	if took > 2*time.Second {
		t.Fatalf("the send took %v: the loose calls' text was built in quadratic time", took)
	}
}
