package inspect

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/cli/clienv"
	"github.com/ctxfs/ctxfs/internal/cli/transcript"
)

// History prints messages.jsonl as a transcript, or with --json byte for
// byte (the file may hold lines this ctx does not understand; --json must
// not lose them). -n N keeps the last N messages, in either form.
func History(e *clienv.Env, p *clienv.Parsed) int {
	last := -1
	if v, given := p.Vals["last"]; given {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return clienv.UsageError(e, "history", fmt.Sprintf("-n takes a number of messages (0 or more), not %q", v))
		}
		last = n
	}
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "history", err, clienv.ExitFailed)
	}
	f, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileMessages))
	if err != nil {
		return clienv.Fail(e, "history", clienv.Missing(w, w.Session, err), clienv.ExitFailed)
	}
	defer f.Close()
	var messages io.Reader = f
	if last >= 0 {
		tail, err := lastLines(f, last)
		if err != nil {
			return clienv.Fail(e, "history", err, clienv.ExitFailed)
		}
		messages = bytes.NewReader(tail)
	}
	if p.On("json") {
		_, err = io.Copy(e.Stdout, messages)
	} else {
		err = transcript.PrintHistory(e.Stdout, messages)
	}
	if err != nil {
		return clienv.Fail(e, "history", err, clienv.ExitFailed)
	}
	return clienv.ExitOK
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

// Output prints latest.md as it is, or with --json as
// {"agent","session","text"}.
func Output(e *clienv.Env, p *clienv.Parsed) int {
	w, err := clienv.Resolve(e, p, p.Args[0])
	if err != nil {
		return clienv.Fail(e, "output", err, clienv.ExitFailed)
	}
	f, err := os.Open(w.Loc.SessionFile(w.Session, abi.FileLatest))
	if err != nil {
		return clienv.Fail(e, "output", clienv.Missing(w, w.Session, err), clienv.ExitFailed)
	}
	defer f.Close()
	if p.On("json") {
		err = outputJSON(e.Stdout, w, f)
	} else {
		_, err = io.Copy(clienv.ForTerminal(e.Stdout), f) // a model's text: see clienv.TerminalText
	}
	if err != nil {
		return clienv.Fail(e, "output", err, clienv.ExitFailed)
	}
	return clienv.ExitOK
}

// outputJSON prints latest.md as one JSON object. latest.md is the text
// of one message, so it is read whole.
func outputJSON(out io.Writer, w *clienv.Where, latest io.Reader) error {
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
