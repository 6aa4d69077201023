package abi

import (
	"bytes"
	"encoding/json"
	"strconv"
	"syscall"
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
	if !bytes.Contains(line, []byte(`"`+uidKey+`"`)) && !bytes.Contains(line, []byte(`\u`)) {
		return false, nil // no key can spell "uid" (an escape could)
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
