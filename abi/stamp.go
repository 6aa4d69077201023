package abi

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/internal/jsonscan"
)

// Lines appended through the mount carry their writer's uid.
//
// Anyone who may append to a log (every member of a shared space) may
// write any line shape, so a line alone cannot say who wrote it: a member
// could write lines under another member's run id. The server therefore
// records the appending uid in each such line, as a top-level "uid"
// field (SPEC 6 allows extra fields), placed last. A line that carries
// "uid" already keeps it only when it is the writer's own, written once
// as the plain decimal number; any other is refused (EINVAL, nothing of
// the write appended). The line as stored, uid included, is what the
// 1 MiB line limit bounds (the verifier holds every stored line to it),
// so a line written through the mount may hold at most 1 MiB less the
// field. Lines the server writes itself (sends, runs, refusals) are not
// stamped: their shapes name their run, and the run its client.

// uidKey is the field that carries a line's writer.
const uidKey = "uid"

// StampWriter returns lines (whole lines, each ending in "\n") with each
// line carrying uid as its "uid" field. EINVAL names the first line
// refused.
//
// It does not validate the lines: the log does, after (sealedlog), and
// a line need not pass the JSON validator twice. Stamping cannot make an invalid line valid: the
// field goes before the line's last non-blank byte, a '}', and a valid
// result must have taken ,"uid":N as a member of the object that '}'
// closes (inside a string, the quote after the comma would leave uid
// bare; inside an array, the colon is invalid), so the line without it
// was a valid object too. Invalid UTF-8 stays invalid beside ASCII. A
// line that does not end in '}' is left as it is, for the log to refuse.
func StampWriter(lines []byte, uid uint32) ([]byte, error) {
	own := strconv.FormatUint(uint64(uid), 10)
	field := `"` + uidKey + `":` + own
	out := make([]byte, 0, len(lines)+(bytes.Count(lines, []byte{'\n'}))*(len(field)+1))
	for n, rest := 1, lines; len(rest) > 0; n++ {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return nil, Errorf(syscall.EINVAL, "append", "data must be whole lines, each ending in \\n")
		}
		line := rest[:i]
		rest = rest[i+1:]
		has, err := carriesUid(line, own)
		if err != nil {
			return nil, Errorf(syscall.EINVAL, "append", "line %d: %v", n, err)
		}
		start := len(out)
		if has || !endsObject(line) {
			out = append(out, line...)
		} else {
			out = appendField(out, line, field)
		}
		if size := len(out) - start; size > MaxLineBytes {
			return nil, Errorf(syscall.EINVAL, "append", "line %d: %d bytes with its writer's %s, over the %d-byte limit", n, size, field, MaxLineBytes)
		}
		out = append(out, '\n')
	}
	return out, nil
}

// carriesUid says whether a valid JSON object line has a top-level "uid"
// field, which must then be own (the writer's uid as JSON writes it) and
// appear once: a reader that takes the first of two keys and one that
// takes the last must both find the writer.
func carriesUid(line []byte, own string) (bool, error) {
	if !mayHold(line, quotedUid) {
		return false, nil // no key can spell "uid"
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false, nil // not an object: the log refuses it
	}
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return false, err
		}
		if tok != uidKey {
			continue
		}
		if found || string(raw) != own {
			return false, Errorf(syscall.EINVAL, "", "a line appended through the mount may carry %q only once, as its writer's uid %s", uidKey, own)
		}
		found = true
	}
	return found, nil
}

// endsObject: line's last byte but JSON white space is '}', after a '{'.
func endsObject(line []byte) bool {
	end := bytes.TrimRight(line, jsonSpace)
	return len(end) > 0 && end[len(end)-1] == '}' && bytes.IndexByte(end, '{') >= 0
}

// jsonSpace is the white space JSON allows around values but newline (a
// line holds none).
const jsonSpace = " \t\r"

// appendField appends line (one that endsObject) to out with field added
// as the last member of the object its last '}' closes.
func appendField(out, line []byte, field string) []byte {
	end := bytes.LastIndexByte(line, '}')
	body := bytes.TrimLeft(line[bytes.IndexByte(line, '{')+1:end], jsonSpace)
	out = append(out, line[:end]...)
	if len(body) > 0 {
		out = append(out, ',')
	}
	out = append(out, field...)
	return append(out, line[end:]...)
}

// Stamped says whether a log line (a valid one, without its newline)
// carries a top-level "uid". Every line appended through the mount does
// (StampWriter), and no line the server writes to messages.jsonl does:
// in messages.jsonl a stamped line is a writer's, never the server's.
// (In events.jsonl a few of the server's records carry the uid they
// name too: approval_result, answer, state and loss events.) A key that
// escapes spell is read as StampWriter read the writer's.
func Stamped(line []byte) bool {
	if !mayHold(line, quotedUid) {
		return false
	}
	found := false
	jsonscan.Members(line, func(key, _ []byte) {
		if k, _ := jsonscan.String(key); k == uidKey {
			found = true
		}
	})
	return found
}

// quotedUid is uidKey as a JSON string.
var quotedUid = [][]byte{[]byte(`"` + uidKey + `"`)}

// mayHold says whether b may hold one of the JSON strings quoted (quotes
// and all, of ASCII letters and '_') as a key or a value: spelled as it
// is, or with an escape. A byte search, so that an ordinary line costs
// no parse.
func mayHold(b []byte, quoted [][]byte) bool {
	if asciiEscape(b) {
		return true
	}
	for _, q := range quoted {
		if bytes.Contains(b, q) {
			return true
		}
	}
	return false
}

// asciiEscape says whether b may hold a \u escape of a character from
// U+0040 to U+007F, where the letters and '_' are: the one escape that
// can spell them. Other text escaped (\u00e9, \u4e2d) is no sign.
func asciiEscape(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u00`))
		if i < 0 {
			return false
		}
		b = b[i+len(`\u00`):]
		if len(b) > 0 && '4' <= b[0] && b[0] <= '7' {
			return true
		}
	}
}

// HostRecords are the event types that the server alone writes to
// events.jsonl and that it trusts when it reads the log back: a run's
// start and done (which runs a restart closes or keeps waiting, as which
// uid and gid), and SPEC 17's host-owned facts, approval_request,
// approval_result, question and answer, with resumed (what a run waits
// for, who answered, the tools allowed for the rest of a resumed run).
// They are proto's Frame names of the same words. A line appended
// through the mount may not be one (CheckNoHostRecord), so each of them
// in a log is the server's, although several carry a uid as a stamped
// line does.
var HostRecords = []string{"start", "done", "approval_request", "approval_result", "question", "answer", "resumed"}

// quotedHostRecords are HostRecords as JSON strings.
var quotedHostRecords = func() [][]byte {
	q := make([][]byte, len(HostRecords))
	for i, typ := range HostRecords {
		q[i] = []byte(`"` + typ + `"`)
	}
	return q
}()

// typeKey is the member that names an event's type.
const typeKey = "type"

// CheckNoHostRecord refuses (EINVAL, naming the line) lines (whole
// lines, each ending in "\n", as appended to events.jsonl through the
// mount) when one is a HostRecords event: a member whose key a reader
// takes for "type" (exactly, or without case as encoding/json matches
// it; any of several, as readers differ on which wins) holds one of
// their names. Lines that hold none of the names in quotes, nor an
// escape that could spell one, are let through without a parse.
func CheckNoHostRecord(lines []byte) error {
	if !mayHold(lines, quotedHostRecords) {
		return nil
	}
	for n, rest := 1, lines; len(rest) > 0; n++ {
		line, next, _ := bytes.Cut(rest, []byte{'\n'})
		rest = next
		if typ := hostRecordOf(line); typ != "" {
			return Errorf(syscall.EINVAL, "append", "line %d: %q events are the server's own, never appended through the mount", n, typ)
		}
	}
	return nil
}

// hostRecordOf is the HostRecords name that line's type is, or "".
func hostRecordOf(line []byte) string {
	if !mayHold(line, quotedHostRecords) {
		return ""
	}
	found := ""
	jsonscan.Members(line, func(key, val []byte) {
		k, _ := jsonscan.String(key)
		v, ok := jsonscan.String(val)
		if ok && strings.EqualFold(k, typeKey) && slices.Contains(HostRecords, v) {
			found = v
		}
	})
	return found
}
