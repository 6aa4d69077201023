package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// The streams in testdata/streams/<cli>/ were printed by the real CLIs
// (versions pinned in testdata/npm) against @copilotkit/aimock serving
// testdata/fixtures/fixtures.json; docs/clis.md has the commands. NAME.stderr,
// where there is one, is what the CLI printed on stderr, and the exit
// status is the table's.

// golden is one captured run and the frames it must map to, summarised
// (summary) with the log frames left out and counted apart.
type golden struct {
	cli, name string
	exit      int
	session   string // the session id the stream names, "" for none
	status    string
	want      []string
}

var goldens = []golden{
	{ClaudeCode, "hello", 0, "83c372c5-b9e6-473e-b054-1eb1d54a3f88", "ok", []string{
		"delta Hello from aimock.",
		"message [text Hello from aimock.]",
		"usage claude-opus-5-5 11 4",
	}},
	{ClaudeCode, "partial", 0, "6996e430-a022-458e-a4a3-3034c602d7f4", "ok", []string{
		"delta Hello from aimock.", // from the stream_event, not again from the assistant event
		"message [text Hello from aimock.]",
		"usage claude-opus-5-5 11 4",
	}},
	{ClaudeCode, "tool", 0, "4bc00285-d2db-45dd-8cc8-3e3ba6199b24", "ok", []string{
		`tool_call toolu_ctxfs1 Bash {"command":"cat note.txt","description":"Read the note"}`,
		`message [tool_call toolu_ctxfs1 Bash]`,
		"tool_result toolu_ctxfs1 Bash false the note says 42",
		"delta The note is read.",
		"message [text The note is read.]",
		"usage claude-opus-5-5 0 0",
	}},
	{ClaudeCode, "badreq", 1, "29f9b926-4e03-4cb7-a5f8-1b2b47f47879", "error", []string{
		"usage claude-opus-5-5 0 0",
		"error EINVAL API Error: 400 bad request, ctxfs",
	}},
	{ClaudeCode, "unknown-resume", 1, "00000000-0000-4000-8000-000000000000", "error", []string{
		"usage  0 0",
		"error ENOENT No conversation found with session ID: 00000000-0000-4000-8000-000000000000",
	}},
	{ClaudeCode, "remember", 0, "0f19e0aa-4172-4e7c-ab48-33b3411d818a", "ok", []string{
		"delta Noted: pelican.", "message [text Noted: pelican.]", "usage claude-opus-5-5 12 3",
	}},
	{ClaudeCode, "resumed", 0, "0f19e0aa-4172-4e7c-ab48-33b3411d818a", "ok", []string{
		"delta The word was pelican.", "message [text The word was pelican.]", "usage claude-opus-5-5 20 5",
	}},

	{Codex, "hello", 0, "01a2340e-57f2-7472-b222-d2d381fab0d3", "ok", []string{
		"delta Hello from aimock.", "message [text Hello from aimock.]", "usage  11 4",
	}},
	{Codex, "tool", 0, "01a2340e-59bb-7f11-8139-dde4198ce732", "ok", []string{
		`tool_call item_1 command_execution {"command":"/bin/bash -lc 'cat note.txt'"}`,
		"message [tool_call item_1 command_execution]",
		"tool_result item_1 command_execution false the note says 42\n",
		"delta The note is read.",
		"message [text The note is read.]",
		"usage  0 0",
	}},
	{Codex, "toolfail", 0, "01a2340e-5c37-7751-8b84-32ebdd36819b", "ok", []string{
		`tool_call item_1 command_execution {"command":"/bin/bash -lc 'cat missing.txt'"}`,
		"message [tool_call item_1 command_execution]",
		"tool_result item_1 command_execution true cat: missing.txt: No such file or directory\n",
		"delta The file is missing.",
		"message [text The file is missing.]",
		"usage  0 0",
	}},
	{Codex, "badreq", 1, "01a2340e-5e43-7772-b611-f4097f8544d1", "error", []string{
		"error EINVAL bad request, ctxfs (invalid_request_error)",
	}},
	{Codex, "srverr", 1, "01a23414-663e-7bc0-b71d-a5afe98b4821", "error", []string{
		"error EIO We’re currently experiencing high demand, which may cause temporary errors.",
	}},
	{Codex, "remember", 0, "01a2340e-5f87-7262-af52-517190c158b0", "ok", []string{
		"delta Noted: pelican.", "message [text Noted: pelican.]", "usage  12 3",
	}},
	{Codex, "resumed", 0, "01a2340e-5f87-7262-af52-517190c158b0", "ok", []string{
		// Codex counts the thread: 12+20 and 3+5.
		"delta The word was pelican.", "message [text The word was pelican.]", "usage  32 8",
	}},
	{Codex, "unknown-resume", 1, "", "error", []string{
		"error ENOENT the session to resume is not there: Error: thread/resume: thread/resume failed: no rollout found for thread id 00000000-0000-4000-8000-000000000000 (code -32600)",
	}},

	{Gemini, "hello", 0, "38658dd4-84b1-438b-b145-7f5ead5c0eb2", "ok", []string{
		"delta Hello from aimock.", "message [text Hello from aimock.]", "usage gemini-2.5-flash 11 4",
	}},
	{Gemini, "tool", 0, "66f69e35-2a07-492c-9a62-9abd15d6a243", "ok", []string{
		`tool_call read_file__call_ctxfs3 read_file {"file_path":"note.txt"}`,
		"message [tool_call read_file__call_ctxfs3 read_file]",
		"tool_result read_file__call_ctxfs3 read_file false ", // Gemini CLI gives the file to the model, not to the stream
		"delta The note is read.",
		"message [text The note is read.]",
		"usage gemini-2.5-flash 0 0",
	}},
	{Gemini, "toolfail", 0, "554995b2-f6c5-4523-bd49-7189bbcca4f3", "ok", []string{
		`tool_call read_file__call_ctxfs4 read_file {"file_path":"missing.txt"}`,
		"message [tool_call read_file__call_ctxfs4 read_file]",
		"tool_result read_file__call_ctxfs4 read_file true File not found.",
		"delta The file is missing.",
		"message [text The file is missing.]",
		"usage gemini-2.5-flash 0 0",
	}},
	{Gemini, "badreq", 144, "189357e9-ab16-4f24-b8c3-c6435e795ceb", "error", []string{
		"usage gemini-2.5-flash 0 0",
		`error EINVAL [API Error: {"error":{"code":400,"message":"bad request, ctxfs","status":"invalid_request_error"}}]`,
	}},
	{Gemini, "remember", 0, "27cace2b-bb1b-4a11-b77e-b1170e3a2b60", "ok", []string{
		"delta Noted: pelican.", "message [text Noted: pelican.]", "usage gemini-2.5-flash 12 3",
	}},
	{Gemini, "resumed", 0, "27cace2b-bb1b-4a11-b77e-b1170e3a2b60", "ok", []string{
		"delta The word was pelican", "delta .", "message [text The word was pelican.]", "usage gemini-2.5-flash 20 5",
	}},
	{Gemini, "unknown-resume", 42, "", "error", []string{
		`error ENOENT the session to resume is not there: Error resuming session: Invalid session identifier "00000000-0000-4000-8000-000000000000".`,
	}},

	{Gemini, "other-cwd-resume", 42, "", "error", []string{
		"error ENOENT the session to resume is not there: Error resuming session: No previous sessions found for this project.",
	}},

	{OpenCode, "hello", 0, "ses_dcbee2ddcffeG72m28xDvgmZll", "ok", []string{
		"delta Hello from aimock.", "message [text Hello from aimock.]", "usage  11 4",
	}},
	{OpenCode, "tool", 0, "ses_dcbee1057ffe7MiuSvEXVmzvAV", "ok", []string{
		`tool_call toolu_ctxfs5 bash {"command":"cat note.txt","description":"Read the note"}`,
		"message [tool_call toolu_ctxfs5 bash]",
		"tool_result toolu_ctxfs5 bash false the note says 42\n",
		"usage  0 0",
		"delta The note is read.",
		"message [text The note is read.]",
		"usage  0 0",
	}},
	{OpenCode, "toolfail", 0, "ses_dcbed8758fferOiRz9x0vWnLyz", "ok", []string{
		`tool_call toolu_ctxfs6 bash {"command":"cat missing.txt","description":"Read a missing file"}`,
		"message [tool_call toolu_ctxfs6 bash]",
		// opencode reports a command that exits 1 as completed.
		"tool_result toolu_ctxfs6 bash false cat: missing.txt: No such file or directory\n",
		"usage  0 0",
		"delta The file is missing.",
		"message [text The file is missing.]",
		"usage  0 0",
	}},
	{OpenCode, "rejected", 0, "ses_dcbedf8adffeS0LofqravcqEFB", "ok", []string{
		`tool_call toolu_ctxfs6 read {"filePath":"/nonexistent/missing.txt"}`,
		"message [tool_call toolu_ctxfs6 read]",
		"tool_result toolu_ctxfs6 read true The user rejected permission to use this specific tool call.",
		"usage  0 0",
	}},
	{OpenCode, "badreq", 1, "ses_dcbede47bffeZzjfaGvamk9FO6", "error", []string{
		"error EINVAL APIError: bad request, ctxfs",
	}},
	{OpenCode, "srverr", 1, "ses_dcbe94118ffeP7mjMrY1sY4lEq", "error", []string{
		// after 80 s of opencode's own retries
		"error EIO APIError: server down, ctxfs",
	}},
	{OpenCode, "remember", 0, "ses_dcbedcedbffer8qLHBDXVioKxc", "ok", []string{
		"delta Noted: pelican.", "message [text Noted: pelican.]", "usage  12 3",
	}},
	{OpenCode, "resumed", 0, "ses_dcbedcedbffer8qLHBDXVioKxc", "ok", []string{
		"delta The word was pelican.", "message [text The word was pelican.]", "usage  20 5",
	}},
	{OpenCode, "unknown-resume", 1, "", "error", []string{
		"error ENOENT the session to resume is not there: Error: Session not found",
	}},
}

func TestGoldenStreams(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.cli+"/"+g.name, func(t *testing.T) {
			a, err := Lookup(g.cli)
			if err != nil {
				t.Fatal(err)
			}
			frames, session, status := runStream(t, a, g.cli, g.name, g.exit)
			if session != g.session {
				t.Errorf("session %q, want %q", session, g.session)
			}
			if status != g.status {
				t.Errorf("status %q, want %q", status, g.status)
			}
			got := summarize(frames)
			if strings.Join(got, "\n") != strings.Join(g.want, "\n") {
				t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(g.want, "\n"))
			}
		})
	}
}

// TestEveryGoldenFileIsChecked keeps the table and the captured runs in
// step: a stream added to testdata is checked, or this fails.
func TestEveryGoldenFileIsChecked(t *testing.T) {
	seen := map[string]bool{}
	for _, g := range goldens {
		seen[g.cli+"/"+g.name+".jsonl"] = true
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "streams", "*", "*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no streams in testdata")
	}
	for _, f := range files {
		rel := filepath.Base(filepath.Dir(f)) + "/" + filepath.Base(f)
		if !seen[rel] {
			t.Errorf("%s is in no golden", rel)
		}
	}
}

// runStream feeds a captured stream through a new parser line by line,
// as the engine will, and checks each frame is a valid log line.
func runStream(t *testing.T, a Adapter, cli, name string, exit int) ([]*proto.Object, string, string) {
	t.Helper()
	dir := filepath.Join("testdata", "streams", cli)
	data, err := os.ReadFile(filepath.Join(dir, name+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	stderr, _ := os.ReadFile(filepath.Join(dir, name+".stderr"))
	p := a.NewParser()
	var frames []*proto.Object
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, MaxLineBytes+1)
	for sc.Scan() {
		frames = append(frames, p.Parse(sc.Bytes())...)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	last, status := p.Finish(exit, stderr)
	frames = append(frames, last...)
	for _, f := range frames {
		if err := abi.CheckLogLine(bytes.TrimSuffix(f.Line(), []byte("\n"))); err != nil {
			t.Errorf("frame %s: %v", f.Line(), err)
		}
	}
	return frames, p.SessionID(), status
}

// summarize writes each frame but the log frames as one short line.
func summarize(frames []*proto.Object) []string {
	var out []string
	for _, f := range frames {
		switch f.Str("type") {
		case proto.FrameDelta:
			out = append(out, "delta "+f.Str("text"))
		case proto.FrameMessage:
			var parts []string
			for _, p := range proto.MessageOf(f).Parts() {
				switch p.Type {
				case "text":
					parts = append(parts, "text "+p.Text)
				default:
					parts = append(parts, p.Type+" "+p.ID+" "+p.Name)
				}
			}
			out = append(out, "message ["+strings.Join(parts, ", ")+"]")
		case proto.FrameToolCall:
			out = append(out, fmt.Sprintf("tool_call %s %s %s", f.Str("id"), f.Str("name"), f.Raw("arguments")))
		case proto.FrameToolResult:
			out = append(out, fmt.Sprintf("tool_result %s %s %s %s", f.Str("tool_call_id"), f.Str("name"), f.Raw("is_error"), f.Str("content")))
		case proto.FrameUsage:
			out = append(out, fmt.Sprintf("usage %s %s %s", f.Str("model"), f.Raw("input_tokens"), f.Raw("output_tokens")))
		case proto.FrameError:
			// The message is abi.Error's: "CLI: ERRNO: words".
			_, words, _ := strings.Cut(f.Str("message"), f.Str("code")+": ")
			out = append(out, "error "+f.Str("code")+" "+words)
		case proto.FrameLog:
		default:
			out = append(out, "unexpected "+string(f.Line()))
		}
	}
	return out
}
