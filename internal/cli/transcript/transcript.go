package transcript

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ctxfs/ctxfs/client"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/proto"
)

// PrintHistory writes messages.jsonl as a transcript: one block per
// message, "role:" then its text, tool calls as "→ tool name(args)" and
// tool results as "← result", blocks separated by a blank line. A line that
// does not parse is shown as it is, because hiding it would hide damage.
func PrintHistory(w io.Writer, messages io.Reader) error {
	w = clienv.ForTerminal(w) // the messages are users', models' and programs' text
	fr := client.NewFrameReader(messages)
	for n := 0; ; n++ {
		f, err := fr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if n > 0 {
			io.WriteString(w, "\n")
		}
		io.WriteString(w, messageBlock(f))
	}
}

// messageBlock renders one message line.
func messageBlock(f client.Frame) string {
	if f.Obj == nil {
		return "?:\n" + string(f.Line) + "\n"
	}
	role := f.Obj.Str("role")
	if role == "" {
		role = "?"
	}
	msg := proto.MessageOf(f.Obj)
	if !proto.HasTextShape(msg.Content) {
		return role + ":\n" + string(msg.Content) + "\n"
	}
	parts := msg.Parts()
	var b strings.Builder
	b.WriteString(role + ":\n")
	for _, p := range parts {
		line := partText(p)
		b.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func partText(p proto.Part) string {
	switch p.Type {
	case "text":
		return p.Text
	case "tool_call":
		return fmt.Sprintf("→ tool %s(%s)", p.Name, Compact(p.Arguments))
	case "tool_result":
		mark := "← "
		if p.IsError {
			mark = "← error: "
		}
		return mark + ResultText(p.Content)
	}
	return fmt.Sprintf("[%s]", p.Type)
}

// ResultText shows a string result as text and anything else as JSON.
func ResultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return Compact(raw)
}

func Compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
