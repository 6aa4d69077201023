package session

import (
	"bytes"
	"encoding/json"
	"strconv"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
)

// Lines appended through the mount carry their writer's uid.
//
// Anyone who may append to a log (every member of a shared space) may
// write any line shape, so a line alone cannot say who wrote it: a member
// could write lines under another member's run id. The engine therefore
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

// stampWriter returns lines (whole lines, each ending in "\n") with each
// line carrying uid as its "uid" field, validating every line first
// (abi.CheckLogLine). EINVAL names the first line refused.
func stampWriter(lines []byte, uid uint32) ([]byte, error) {
	own := strconv.FormatUint(uint64(uid), 10)
	field := `"` + uidKey + `":` + own
	out := make([]byte, 0, len(lines)+(bytes.Count(lines, []byte{'\n'}))*(len(field)+1))
	for n, rest := 1, lines; len(rest) > 0; n++ {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return nil, abi.Errorf(syscall.EINVAL, "append", "data must be whole lines, each ending in \\n")
		}
		line := rest[:i]
		rest = rest[i+1:]
		if err := abi.CheckLogLine(line); err != nil {
			return nil, abi.Errorf(syscall.EINVAL, "append", "line %d: %v", n, err)
		}
		has, err := carriesUid(line, own)
		if err != nil {
			return nil, abi.Errorf(syscall.EINVAL, "append", "line %d: %v", n, err)
		}
		start := len(out)
		if has {
			out = append(out, line...)
		} else {
			out = appendField(out, line, field)
		}
		if size := len(out) - start; size > abi.MaxLineBytes {
			return nil, abi.Errorf(syscall.EINVAL, "append", "line %d: %d bytes with its writer's %s, over the %d-byte limit", n, size, field, abi.MaxLineBytes)
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
	if _, err := dec.Token(); err != nil { // the '{' abi.CheckLogLine saw
		return false, err
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
			return false, abi.Errorf(syscall.EINVAL, "", "a line appended through the mount may carry %q only once, as its writer's uid %s", uidKey, own)
		}
		found = true
	}
	return found, nil
}

// appendField appends line (a valid JSON object) to out with field added
// as its last member.
func appendField(out, line []byte, field string) []byte {
	end := bytes.LastIndexByte(line, '}')
	body := bytes.TrimLeft(line[bytes.IndexByte(line, '{')+1:end], " \t\r")
	out = append(out, line[:end]...)
	if len(body) > 0 {
		out = append(out, ',')
	}
	out = append(out, field...)
	return append(out, line[end:]...)
}
