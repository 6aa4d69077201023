package client

import (
	"bufio"
	"bytes"
	"io"
	"strings"

	"github.com/ctxfs/ctxfs/proto"
)

// RunText returns the assistant text that run recorded in a messages.jsonl
// stream: each message's text by the one rule (proto.Message.Text), one
// message after another on separate lines. A replayed send gets only
// start and done frames (SPEC section 8), so this is where its text comes
// from. Lines that do not parse are skipped: they belong to no run.
func RunText(messages io.Reader, run string) (string, error) {
	fr := NewFrameReader(messages)
	var b strings.Builder
	for {
		f, err := fr.Next()
		if err == io.EOF {
			return b.String(), nil
		}
		if err != nil {
			return "", err
		}
		if f.Obj == nil || f.Obj.Str("run") != run || f.Obj.Str("role") != "assistant" {
			continue
		}
		text := MessageText(f.Obj)
		if text == "" {
			continue
		}
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n') // separate messages, as the streaming send separates them
		}
		b.WriteString(text)
	}
}

// MessageText is the text of a message frame or message line
// (proto.Message.Text).
func MessageText(o *proto.Object) string { return proto.MessageOf(o).Text() }

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
