package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/ctxfs/ctxfs/abi"
)

// runHistory prints messages.jsonl as a transcript, or with --json byte for
// byte (the file may hold lines this ctx does not understand; --json must
// not lose them). -n N keeps the last N messages, in either form.
func runHistory(e *Env, p *Parsed) int {
	last := -1
	if v, given := p.Vals["last"]; given {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return UsageError(e, "history", fmt.Sprintf("-n takes a number of messages (0 or more), not %q", v))
		}
		last = n
	}
	w, err := Resolve(e, p, p.Args[0])
	if err != nil {
		return Fail(e, "history", err, ExitFailed)
	}
	f, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileMessages))
	if err != nil {
		return Fail(e, "history", Missing(w, w.Session, err), ExitFailed)
	}
	defer f.Close()
	var messages io.Reader = f
	if last >= 0 {
		tail, err := lastLines(f, last)
		if err != nil {
			return Fail(e, "history", err, ExitFailed)
		}
		messages = bytes.NewReader(tail)
	}
	if p.On("json") {
		_, err = io.Copy(e.Stdout, messages)
	} else {
		err = PrintHistory(e.Stdout, messages)
	}
	if err != nil {
		return Fail(e, "history", err, ExitFailed)
	}
	return ExitOK
}

// lastLines returns the last n non-blank lines of r as they are, newlines
// included. It reads r once, holding at most n lines.
func lastLines(r io.Reader, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var lines [][]byte
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			lines = append(lines, line)
			if len(lines) > n {
				lines = lines[1:]
			}
		}
		if err == io.EOF {
			return bytes.Join(lines, nil), nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// runOutput prints latest.md as it is, or with --json as
// {"agent","session","text"}.
func runOutput(e *Env, p *Parsed) int {
	w, err := Resolve(e, p, p.Args[0])
	if err != nil {
		return Fail(e, "output", err, ExitFailed)
	}
	f, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileLatest))
	if err != nil {
		return Fail(e, "output", Missing(w, w.Session, err), ExitFailed)
	}
	defer f.Close()
	if p.On("json") {
		err = outputJSON(e.Stdout, w, f)
	} else {
		_, err = io.Copy(e.Stdout, f)
	}
	if err != nil {
		return Fail(e, "output", err, ExitFailed)
	}
	return ExitOK
}

// outputJSON prints latest.md as one JSON object. latest.md is the text
// of one message, so it is read whole.
func outputJSON(out io.Writer, w *Where, latest io.Reader) error {
	text, err := io.ReadAll(latest)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	return enc.Encode(struct {
		Agent   string `json:"agent"`
		Session string `json:"session"`
		Text    string `json:"text"`
	}{w.Loc.Agent, w.Session, string(text)})
}
