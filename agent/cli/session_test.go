package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
)

// The files in testdata/sessions/ were written by the real CLIs in the
// runs of testdata/streams (docs/clis.md): Claude Code's project file of
// the tool run and of the remember/recall runs (one file: --resume
// appends to it), Codex's rollouts of the same.

func TestReadSessionFiles(t *testing.T) {
	for _, c := range []struct {
		cli, file, id, cwd string
		want               []string
	}{
		{ClaudeCode, "tool.jsonl", "4bc00285-d2db-45dd-8cc8-3e3ba6199b24", "/tmp/cc/work", []string{
			"user ctxfs-tool-claude",
			`assistant [tool_call toolu_ctxfs1 Bash {"command":"cat note.txt","description":"Read the note"}]`,
			"tool Bash toolu_ctxfs1 false the note says 42",
			"assistant [text The note is read.]",
		}},
		{ClaudeCode, "resumed.jsonl", "0f19e0aa-4172-4e7c-ab48-33b3411d818a", "/tmp/cc/work", []string{
			"user ctxfs-remember",
			"assistant [text Noted: pelican.]",
			"user ctxfs-recall",
			"assistant [text The word was pelican.]",
		}},
		{Codex, "tool.jsonl", "01a2340e-59bb-7f11-8139-dde4198ce732", "/tmp/cx/work", []string{
			"user ctxfs-tool-codex",
			`assistant [tool_call call_ctxfs1 exec_command {"cmd":"cat note.txt"}]`,
			"tool exec_command call_ctxfs1 false Chunk ID: b7b542\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 5\nOutput:\nthe note says 42\n",
			"assistant [text The note is read.]",
		}},
		{Codex, "resumed.jsonl", "01a2340e-5f87-7262-af52-517190c158b0", "/tmp/cx/work", []string{
			"user ctxfs-remember",
			"assistant [text Noted: pelican.]",
			"user ctxfs-recall",
			"assistant [text The word was pelican.]",
		}},
	} {
		t.Run(c.cli+"/"+c.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", "sessions", c.cli, c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			s, err := ReadSession(c.cli, f)
			if err != nil {
				t.Fatal(err)
			}
			if s.ID != c.id || s.CWD != c.cwd {
				t.Errorf("id %q cwd %q", s.ID, s.CWD)
			}
			got := summarizeMessages(s.Messages)
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("messages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			for _, m := range s.Messages {
				if err := abi.CheckLogLine(bytes.TrimSuffix(m.Line(), []byte("\n"))); err != nil || !m.Has("ts") {
					t.Errorf("%s: %v (or no ts)", m.Line(), err)
				}
			}
		})
	}
}

// TestReadSessionRefusesMalformedFiles: EINVAL, naming the line, and
// nothing returned.
func TestReadSessionRefusesMalformedFiles(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "sessions", ClaudeCode, "resumed.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	goodLines := bytes.SplitAfter(good, []byte("\n"))
	withLine := func(n int, line string) string {
		var b bytes.Buffer
		for i, l := range goodLines {
			if i == n-1 {
				b.WriteString(line + "\n")
			}
			b.Write(l)
		}
		return b.String()
	}
	for _, c := range []struct {
		name, cli, file, words string
	}{
		{"not JSON", ClaudeCode, withLine(3, "this is not json"), "line 3: not a JSON object"},
		{"an array", ClaudeCode, withLine(2, "[1]"), "line 2: not a JSON object"},
		{"invalid UTF-8", ClaudeCode, withLine(5, "{\"type\":\"user\",\"x\":\"\xff\"}"), "line 5: not a JSON object"},
		{"a second session", ClaudeCode, withLine(4, `{"type":"user","sessionId":"another-1","message":{"content":"x"}}`), `line 4: a second session id "another-1"`},
		{"a hostile session id", ClaudeCode, `{"type":"user","sessionId":"--help","message":{"content":"x"}}`, `line 1: "--help" is not a session id`},
		{"a user line without a message", ClaudeCode, withLine(6, `{"type":"user","sessionId":"0f19e0aa-4172-4e7c-ab48-33b3411d818a"}`), "line 6: a user line without a message"},
		{"a message of another shape", ClaudeCode, withLine(2, `{"type":"assistant","message":{"content":42}}`), "line 2: a assistant message whose content is neither text nor parts"},
		{"a type of another shape", ClaudeCode, `{"type":["user"]}`, "line 1: not a Claude Code session line"},
		{"empty", ClaudeCode, "", "no session id"},
		{"no messages", ClaudeCode, `{"type":"summary","sessionId":"abc"}` + "\n", "no messages"},
		{"a long line", ClaudeCode, `{"type":"user","x":"` + strings.Repeat("a", MaxSessionLine) + `"}`, "line 1: line over"},
		{"codex without payload", Codex, `{"type":"session_meta"}`, "line 1: not a Codex rollout line"},
		{"codex payload of another shape", Codex, `{"type":"response_item","payload":{"type":"message","role":7}}`, "line 1: a response_item line whose payload has another shape"},
		{"another CLI", Gemini, "{}", "cannot import"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := ReadSession(c.cli, strings.NewReader(c.file))
			if abi.Errno(err) != syscall.EINVAL || s != nil || !strings.Contains(err.Error(), c.words) {
				t.Fatalf("%v, %v; want EINVAL %q", s, err, c.words)
			}
		})
	}
}

// FuzzReadSession: any file is a Session or EINVAL, never a panic, and a
// Session's messages are valid log lines.
func FuzzReadSession(f *testing.F) {
	for _, cli := range []string{ClaudeCode, Codex} {
		files, _ := filepath.Glob(filepath.Join("testdata", "sessions", cli, "*.jsonl"))
		for _, file := range files {
			data, _ := os.ReadFile(file)
			if len(data) > 64<<10 {
				data = data[len(data)-64<<10:]
			}
			f.Add(cli == Codex, data)
		}
	}
	f.Fuzz(func(t *testing.T, codex bool, data []byte) {
		cli := ClaudeCode
		if codex {
			cli = Codex
		}
		s, err := ReadSession(cli, bytes.NewReader(data))
		if err != nil {
			if abi.Errno(err) != syscall.EINVAL {
				t.Fatalf("errno %v: %v", abi.Errno(err), err)
			}
			return
		}
		if !ValidSessionID(s.ID) || len(s.Messages) == 0 {
			t.Fatalf("session %q with %d messages", s.ID, len(s.Messages))
		}
		for _, m := range s.Messages {
			if err := abi.CheckLogLine(bytes.TrimSuffix(m.Line(), []byte("\n"))); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// summarizeMessages writes each message as one short line.
func summarizeMessages(msgs []*proto.Object) []string {
	var out []string
	for _, o := range msgs {
		m := proto.MessageOf(o)
		switch m.Role {
		case "user":
			out = append(out, "user "+m.Text())
		case "tool":
			for _, r := range m.ToolResults() {
				out = append(out, fmt.Sprintf("tool %s %s %v %s", m.Name, r.ToolCallID, r.IsError, proto.RawString(r.Content)))
			}
		default:
			var parts []string
			for _, p := range m.Parts() {
				if p.Type == "text" {
					parts = append(parts, "text "+p.Text)
				} else {
					parts = append(parts, fmt.Sprintf("%s %s %s %s", p.Type, p.ID, p.Name, p.Arguments))
				}
			}
			out = append(out, m.Role+" ["+strings.Join(parts, ", ")+"]")
		}
	}
	return out
}
