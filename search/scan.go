package search

import (
	"strings"

	"github.com/ctxfs/ctxfs/internal/jsonscan"
)

// messageFields and partFields are the members search reads of a line
// and of a content part.
var (
	messageFields = jsonscan.NewFields("role", "run", "ts", "content")
	partFields    = jsonscan.NewFields("type", "text")
)

// scanMessage reads the fields search wants from a line in one pass
// (jsonscan), as proto.ParseMessage reads them with encoding/json, which
// costs most of the time of indexing and verifying (it validates the
// whole line, then decodes it): keys match as encoding/json matches them,
// the last of duplicate keys wins, a value of another type reads as "".
func scanMessage(line []byte) (m Message, isMsg bool) {
	var vals [4][]byte
	if !messageFields.Object(line, vals[:]) {
		return m, false
	}
	if m.Role = str(vals[0]); m.Role != "user" && m.Role != "assistant" {
		return Message{}, false
	}
	m.Run, m.TS = str(vals[1]), str(vals[2])
	m.Text = contentText(vals[3])
	return m, true
}

// contentText is proto.ContentText: a string content, or the text parts
// of an array joined (an element that is no object, or whose members are
// of other types, adds nothing).
func contentText(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		return str(raw)
	case '[':
	default:
		return ""
	}
	var parts []string
	var vals [2][]byte
	jsonscan.Elements(raw, func(elem []byte) {
		if partFields.Object(elem, vals[:]) && str(vals[0]) == "text" {
			parts = append(parts, str(vals[1]))
		}
	})
	return strings.Join(parts, "")
}

// str is a raw value's string, "" for a value of another type (or none).
func str(raw []byte) string {
	s, _ := jsonscan.String(raw)
	return s
}
