package client

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"

	"github.com/ctxfs/ctxfs/proto"
)

// Part is one element of a content array (SPEC section 6): text, a tool
// call or a tool result.
type Part struct {
	Type       string          `json:"type"`
	Text       string          `json:"text,omitempty"`
	ID         string          `json:"id,omitempty"`
	Name       string          `json:"name,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Content    json.RawMessage `json:"content,omitempty"`
	IsError    bool            `json:"is_error,omitempty"`
}

// Parts decodes a content value. User messages carry a plain string, which
// is one text part; a missing content is no parts.
func Parts(raw json.RawMessage) ([]Part, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Part{{Type: "text", Text: s}}, nil
	}
	var parts []Part
	err := json.Unmarshal(raw, &parts)
	return parts, err
}

// Text joins the text parts of parts. Separate parts are separate
// paragraphs (an agent says something, calls a tool, says more), so they
// are put on separate lines rather than glued together.
func Text(parts []Part) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" || p.Text == "" {
			continue
		}
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String()
}

// RunText returns the assistant text that run recorded in a messages.jsonl
// stream. A replayed send gets only start and done frames (SPEC section 8),
// so this is where its text comes from. Lines that do not parse are skipped:
// they belong to no run.
func RunText(messages io.Reader, run string) (string, error) {
	fr := NewFrameReader(messages)
	var texts []Part
	for {
		f, err := fr.Next()
		if err == io.EOF {
			return Text(texts), nil
		}
		if err != nil {
			return "", err
		}
		if f.Obj == nil || f.Obj.Str("run") != run || f.Obj.Str("role") != "assistant" {
			continue
		}
		parts, _ := Parts(f.Obj.Raw("content"))
		texts = append(texts, Part{Type: "text", Text: Text(parts)})
	}
}

// MessageText is the text of a message frame or message line.
func MessageText(o *proto.Object) string {
	parts, _ := Parts(o.Raw("content"))
	return Text(parts)
}

// RunStderr returns the last n lines of the agent's stderr that run
// recorded in an events.jsonl stream ({"type":"log","stream":"stderr"}
// events, SPEC section 10). Lines of other runs, and lines that do not
// parse, are skipped; only lines that name the run are parsed at all.
func RunStderr(events io.Reader, run string, n int) ([]string, error) {
	br := bufio.NewReaderSize(events, 64<<10)
	mark := []byte(`"` + run + `"`)
	var lines []string
	for {
		line, err := br.ReadBytes('\n')
		if bytes.Contains(line, mark) && bytes.Contains(line, []byte(`"log"`)) {
			o, perr := proto.ParseObject(bytes.TrimRight(line, "\r\n"), false)
			if perr == nil && o.Str("type") == proto.FrameLog && o.Str("run") == run && o.Str("stream") == "stderr" {
				if lines = append(lines, o.Str("text")); len(lines) > n {
					lines = lines[1:]
				}
			}
		}
		if err == io.EOF {
			return lines, nil
		}
		if err != nil {
			return lines, err
		}
	}
}
