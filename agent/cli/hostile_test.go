package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// A stream may come from a hostile program, or from a CLI newer than its
// mapping: whatever a line holds, Parse keeps it as a log frame at worst,
// every frame fits a log line, and nothing panics.

func TestUnknownEventsAreLogged(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			a, _ := Lookup(name)
			p := a.NewParser()
			frames := p.Parse([]byte(`{"type":"brand_new_kind","payload":{"x":[1,2,3]}}`))
			if len(frames) != 1 || frames[0].Str("type") != proto.FrameLog || frames[0].Str("kind") != "brand_new_kind" ||
				string(frames[0].Raw("event")) != `{"type":"brand_new_kind","payload":{"x":[1,2,3]}}` || frames[0].Str("cli") != name {
				t.Fatalf("frames %s", lines(frames))
			}
			for _, bad := range []string{`not json`, `[1,2]`, `{"type":`, `{"type":42}`, "\xff\xfe", `{"type":"message","role":["x"]}`} {
				frames := p.Parse([]byte(bad))
				if len(frames) != 1 || frames[0].Str("type") != proto.FrameLog {
					t.Errorf("%q: frames %s", bad, lines(frames))
				}
				checkFrames(t, frames)
			}
			if frames := p.Parse([]byte("  \t")); len(frames) != 0 {
				t.Errorf("a blank line made %s", lines(frames))
			}
			if _, status := p.Finish(0, nil); status != "ok" {
				t.Errorf("after unknown events only, status %q", status)
			}
		})
	}
}

func TestLongLineIsDroppedAndSaid(t *testing.T) {
	p, _ := Lookup(ClaudeCode)
	parser := p.NewParser()
	line := append([]byte(`{"type":"assistant","message":{"content":[{"type":"text","text":"`), bytes.Repeat([]byte("a"), MaxLineBytes)...)
	line = append(line, `"}]}}`...)
	frames := parser.Parse(line)
	if len(frames) != 1 || frames[0].Str("type") != proto.FrameLog || !strings.Contains(frames[0].Str("text"), "dropped") {
		t.Fatalf("frames %s", lines(frames))
	}
}

// TestLargeTextIsCut: a message's text is kept to MaxTextBytes even when
// every byte of it is one JSON escapes into six, and the frames say so.
func TestLargeTextIsCut(t *testing.T) {
	ev := []byte(`{"type":"item.completed","item":{"id":"i","type":"agent_message","text":"` + strings.Repeat("<", MaxLineBytes/2) + `"}}`)
	a, _ := Lookup(Codex)
	p := a.NewParser()
	frames := p.Parse(ev)
	last, _ := p.Finish(0, nil)
	frames = append(frames, last...)
	checkFrames(t, frames)
	if len(frames) != 2 || frames[0].Str("type") != proto.FrameDelta || frames[1].Str("type") != proto.FrameMessage ||
		string(frames[1].Raw("truncated")) != "true" || len(proto.MessageOf(frames[1]).Text()) != MaxTextBytes {
		t.Fatalf("frames %.300s", lines(frames))
	}
}

// TestLargeToolOutputIsCut: a tool result's content is cut to MaxToolBytes
// and marked; arguments over it become a string of their start.
func TestLargeToolOutputIsCut(t *testing.T) {
	big := strings.Repeat("x", 3*MaxToolBytes)
	ev, _ := json.Marshal(map[string]any{"type": "tool_use", "sessionID": "ses_1", "part": map[string]any{
		"type": "tool", "tool": "bash", "callID": "c1",
		"state": map[string]any{"status": "completed", "input": map[string]string{"command": big}, "output": big}}})
	a, _ := Lookup(OpenCode)
	frames := a.NewParser().Parse(ev)
	checkFrames(t, frames)
	var call, result *proto.Object
	for _, f := range frames {
		switch f.Str("type") {
		case proto.FrameToolCall:
			call = f
		case proto.FrameToolResult:
			result = f
		}
	}
	if call == nil || result == nil {
		t.Fatalf("frames %.300s", lines(frames))
	}
	if string(call.Raw("truncated")) != "true" || call.Raw("arguments")[0] != '"' {
		t.Errorf("call %.200s", call.Line())
	}
	if string(result.Raw("truncated")) != "true" || len(result.Str("content")) != MaxToolBytes {
		t.Errorf("result %.200s", result.Line())
	}
}

// TestSessionIDsOfAnotherShapeAreNotKept: the id goes back on a command
// line, so a stream that names "--dangerous-flag" or a path as its session
// is not believed.
func TestSessionIDsOfAnotherShapeAreNotKept(t *testing.T) {
	for _, id := range []string{"--dangerously-skip-permissions", "../../etc/passwd", "a b", strings.Repeat("a", 200), "x\n", ""} {
		a, _ := Lookup(Gemini)
		p := a.NewParser()
		ev, _ := json.Marshal(map[string]string{"type": "init", "session_id": id, "model": "m"})
		frames := p.Parse(ev)
		if p.SessionID() != "" {
			t.Errorf("%q kept as the session id", id)
		}
		if id != "" && (len(frames) != 1 || frames[0].Str("type") != proto.FrameLog) {
			t.Errorf("%q: frames %s", id, lines(frames))
		}
	}
	a, _ := Lookup(ClaudeCode)
	p := a.NewParser()
	p.Parse([]byte(`{"type":"system","subtype":"init","session_id":"first-1"}`))
	frames := p.Parse([]byte(`{"type":"result","subtype":"success","session_id":"second-2"}`))
	if p.SessionID() != "first-1" || len(frames) == 0 || frames[0].Str("kind") != "session" {
		t.Errorf("a second session id: kept %q, frames %s", p.SessionID(), lines(frames))
	}
}

func TestInvocationRefusesBadResumeAndURLs(t *testing.T) {
	for _, name := range Names() {
		a, _ := Lookup(name)
		for _, bad := range []Options{
			{Resume: "--help"}, {Resume: "a;b"}, {Resume: "../x"},
		} {
			if _, err := a.Invocation(bad); abi.Errno(err) != syscall.EINVAL {
				t.Errorf("%s %+v: %v", name, bad, err)
			}
		}
		inv, err := a.Invocation(Options{Resume: "0f19e0aa-4172-4e7c-ab48-33b3411d818a"})
		if err != nil || inv.KeyVar == "" {
			t.Errorf("%s: %+v %v", name, inv, err)
		}
		if !strings.Contains(" "+strings.Join(inv.Args, " ")+" ", " 0f19e0aa-4172-4e7c-ab48-33b3411d818a ") {
			t.Errorf("%s: the resume id is not an argument of %q", name, inv.Args)
		}
	}
	for _, name := range []string{Codex, OpenCode} {
		a, _ := Lookup(name)
		for _, bad := range []string{"file:///etc/passwd", "http://x\"\nmodel_provider = \"evil", "not a url", "http://"} {
			if _, err := a.Invocation(Options{BaseURL: bad, Model: map[string]string{Codex: "", OpenCode: "anthropic/m"}[name]}); abi.Errno(err) != syscall.EINVAL {
				t.Errorf("%s base URL %q: %v", name, bad, err)
			}
		}
	}
	a, _ := Lookup(OpenCode)
	if _, err := a.Invocation(Options{Model: "evil/model"}); abi.Errno(err) != syscall.EINVAL {
		t.Errorf("opencode with an unknown provider: %v", err)
	}
}

// TestInvocationFilesHoldNoKey: the config files an Invocation writes name
// the key's variable, never a key; the CLIs read it from the environment.
func TestInvocationFilesHoldNoKey(t *testing.T) {
	for _, name := range Names() {
		a, _ := Lookup(name)
		inv, err := a.Invocation(Options{BaseURL: "http://127.0.0.1:9/v1", Model: map[string]string{OpenCode: "openai/gpt-5"}[name]})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range inv.Files {
			if filepath.IsAbs(f.Path) || strings.Contains(f.Path, "..") || bytes.Contains(bytes.ToLower(f.Data), []byte("sk-")) {
				t.Errorf("%s: file %s: %s", name, f.Path, f.Data)
			}
		}
		for _, e := range inv.Env {
			if strings.HasPrefix(e, inv.KeyVar+"=") {
				t.Errorf("%s: Env sets the key variable: %s", name, e)
			}
		}
	}
}

// fuzzParse feeds the golden streams' lines and the fuzzer's bytes to a
// parser: it must not panic, and every frame must be a valid log line.
func fuzzParse(f *testing.F, cli string) {
	files, _ := filepath.Glob(filepath.Join("testdata", "streams", cli, "*.jsonl"))
	for _, file := range files {
		data, _ := os.ReadFile(file)
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(line) < 4096 {
				f.Add(line, line)
			}
		}
	}
	f.Add([]byte(`{"type":"x"}`), []byte("not json"))
	a, err := Lookup(cli)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		p := a.NewParser()
		frames := append(p.Parse(first), p.Parse(second)...)
		last, status := p.Finish(len(first)%3, second)
		frames = append(frames, last...)
		checkFrames(t, frames)
		if status != "ok" && status != abi.StateError {
			t.Fatalf("status %q", status)
		}
		if id := p.SessionID(); id != "" && !ValidSessionID(id) {
			t.Fatalf("session id %q", id)
		}
	})
}

func FuzzParseClaudeCode(f *testing.F) { fuzzParse(f, ClaudeCode) }
func FuzzParseCodex(f *testing.F)      { fuzzParse(f, Codex) }
func FuzzParseGemini(f *testing.F)     { fuzzParse(f, Gemini) }
func FuzzParseOpenCode(f *testing.F)   { fuzzParse(f, OpenCode) }

// checkFrames fails when a frame is not a valid log line of the engine's
// size or has no known type.
func checkFrames(t *testing.T, frames []*proto.Object) {
	t.Helper()
	known := map[string]bool{proto.FrameDelta: true, proto.FrameMessage: true, proto.FrameToolCall: true,
		proto.FrameToolResult: true, proto.FrameUsage: true, proto.FrameError: true, proto.FrameLog: true}
	for _, f := range frames {
		line := bytes.TrimSuffix(f.Line(), []byte("\n"))
		if err := abi.CheckLogLine(line); err != nil || len(line) > maxFrameBytes {
			t.Fatalf("frame of %d bytes: %v: %.200s", len(line), err, line)
		}
		if !known[f.Str("type")] {
			t.Fatalf("frame type %q", f.Str("type"))
		}
		if f.Str("type") == proto.FrameError && proto.FrameErrno(f) == 0 {
			t.Fatalf("error frame without a known errno: %s", line)
		}
	}
}

func lines(frames []*proto.Object) string {
	var b strings.Builder
	for _, f := range frames {
		b.Write(f.Line())
	}
	return b.String()
}

// TestUsageCountsClamped: a CLI's usage counts, however huge or negative,
// are recorded within [0, proto.MaxTokens], so that sums of them never wrap.
func TestUsageCountsClamped(t *testing.T) {
	p, _ := Lookup(ClaudeCode)
	frames := p.NewParser().Parse([]byte(`{"type":"result","subtype":"success","usage":{"input_tokens":9223372036854775807,` +
		`"output_tokens":-7,"cache_read_input_tokens":9223372036854775807,"cache_creation_input_tokens":3}}`))
	var u *proto.Object
	for _, f := range frames {
		if f.Str("type") == proto.FrameUsage {
			u = f
		}
	}
	if u == nil {
		t.Fatalf("no usage frame in %s", lines(frames))
	}
	want := map[string]string{"input_tokens": "9007199254740992", "output_tokens": "0",
		"cache_read_input_tokens": "9007199254740992", "cache_creation_input_tokens": "3"}
	for k, v := range want {
		if got := string(u.Raw(k)); got != v {
			t.Errorf("%s %s, want %s", k, got, v)
		}
	}
}
