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
func runHistory(e *env, p *parsed) int {
	last := -1
	if v, given := p.vals["last"]; given {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return usageError(e, "history", fmt.Sprintf("-n takes a number of messages (0 or more), not %q", v))
		}
		last = n
	}
	w, err := resolve(e, p, p.args[0])
	if err != nil {
		return fail(e, "history", err, exitFailed)
	}
	f, err := os.Open(w.loc.SessionFile(w.session, abi.FileMessages))
	if err != nil {
		return fail(e, "history", missing(w, w.session, err), exitFailed)
	}
	defer f.Close()
	var messages io.Reader = f
	if last >= 0 {
		tail, err := lastLines(f, last)
		if err != nil {
			return fail(e, "history", err, exitFailed)
		}
		messages = bytes.NewReader(tail)
	}
	if p.on("json") {
		_, err = io.Copy(e.stdout, messages)
	} else {
		err = printHistory(e.stdout, messages)
	}
	if err != nil {
		return fail(e, "history", err, exitFailed)
	}
	return exitOK
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
func runOutput(e *env, p *parsed) int {
	w, err := resolve(e, p, p.args[0])
	if err != nil {
		return fail(e, "output", err, exitFailed)
	}
	f, err := os.Open(w.loc.SessionFile(w.session, abi.FileLatest))
	if err != nil {
		return fail(e, "output", missing(w, w.session, err), exitFailed)
	}
	defer f.Close()
	if p.on("json") {
		err = outputJSON(e.stdout, w, f)
	} else {
		_, err = io.Copy(e.stdout, f)
	}
	if err != nil {
		return fail(e, "output", err, exitFailed)
	}
	return exitOK
}

// outputJSON prints latest.md as one JSON object. latest.md is the text
// of one message, so it is read whole.
func outputJSON(out io.Writer, w *where, latest io.Reader) error {
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
	}{w.loc.Agent, w.session, string(text)})
}
