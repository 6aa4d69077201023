package search

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scanMessage reads the fields search wants from a line without
// encoding/json, which costs most of the time of indexing and verifying
// (it validates the whole line, then decodes it). sure is false when the
// line is anything but a well-formed JSON object of valid UTF-8 in the
// subset it reads: ParseMessage then asks encoding/json. Keys match
// exactly, and the last of duplicate keys wins, as with encoding/json.
func scanMessage(line []byte) (m Message, isMsg, sure bool) {
	s := &scanner{b: line}
	var content contentValue
	ok := s.object(func(key string) bool {
		switch key {
		case "role":
			return s.field(&m.Role)
		case "run":
			return s.field(&m.Run)
		case "ts":
			return s.field(&m.TS)
		case "content":
			content = contentValue{}
			return s.content(&content)
		}
		return s.skip()
	})
	if s.ws(); !ok || s.i != len(s.b) {
		return m, false, false
	}
	if m.Role != "user" && m.Role != "assistant" {
		return Message{}, false, true
	}
	m.Text = content.text()
	return m, true, true
}

// contentValue is a content string, or the text parts of a content array.
type contentValue struct {
	str   string
	parts []string
}

func (c contentValue) text() string {
	if c.parts == nil {
		return c.str
	}
	return strings.Join(c.parts, "")
}

// scanner reads JSON from b at i.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// peek is the next byte after white space, 0 at the end.
func (s *scanner) peek() byte {
	if s.ws(); s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// object reads an object, calling member for each key with the scanner at
// its value, which member must read.
func (s *scanner) object(member func(key string) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.str()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		if !member(key) {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem with the scanner at each element.
func (s *scanner) array(elem func() bool) bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// field reads a value into dst when it is a string (else dst is "", as
// encoding/json leaves a field of another type).
func (s *scanner) field(dst *string) bool {
	*dst = ""
	if s.peek() != '"' {
		return s.skip()
	}
	v, ok := s.str()
	*dst = v
	return ok
}

// content reads a content value: a string, or an array whose text parts
// are kept; anything else holds no text.
func (s *scanner) content(c *contentValue) bool {
	switch s.peek() {
	case '"':
		return s.field(&c.str)
	case '[':
		c.parts = []string{}
		return s.array(func() bool {
			if s.peek() != '{' {
				return s.skip()
			}
			var typ, text string
			ok := s.object(func(key string) bool {
				switch key {
				case "type":
					return s.field(&typ)
				case "text":
					return s.field(&text)
				}
				return s.skip()
			})
			if ok && typ == "text" {
				c.parts = append(c.parts, text)
			}
			return ok
		})
	}
	return s.skip()
}

// skip reads any value.
func (s *scanner) skip() bool {
	switch c := s.peek(); {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{':
		return s.object(func(string) bool { return s.skip() })
	case c == '[':
		return s.array(s.skip)
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.number()
}

func (s *scanner) literal(word string) bool {
	if !strings.HasPrefix(string(s.b[s.i:min(len(s.b), s.i+len(word))]), word) {
		return false
	}
	s.i += len(word)
	return true
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case !s.digits():
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		return s.digits()
	}
	return true
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// str reads a string (after white space). Invalid UTF-8, a raw control
// character or a bad escape fail it; escapes are decoded as encoding/json
// does (a lone surrogate becomes U+FFFD).
func (s *scanner) str() (string, bool) {
	if s.peek() != '"' {
		return "", false
	}
	s.i++
	start := s.i
	// The common case: no escape and no control character before the
	// closing quote, found with word-at-a-time scans. Anything else (or a
	// string not closed) is read byte by byte below.
	if q := bytes.IndexByte(s.b[start:], '"'); q >= 0 {
		raw := s.b[start : start+q]
		if bytes.IndexByte(raw, '\\') < 0 && !hasControl(raw) {
			s.i = start + q + 1
			return string(raw), utf8.Valid(raw)
		}
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			raw := s.b[start:s.i]
			s.i++
			return string(raw), utf8.Valid(raw)
		}
		if c == '\\' || c < 0x20 {
			break
		}
		s.i++
	}
	return s.escaped(start)
}

// hasControl reports whether b holds a byte below 0x20, eight bytes at a
// time (a word holds one when subtracting 0x20 from each byte borrows
// into a byte whose high bit was clear).
func hasControl(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if (x-0x20*ones)&^x&highs != 0 {
			return true
		}
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return true
		}
	}
	return false
}

// escaped reads the rest of a string that has escapes, from start.
func (s *scanner) escaped(start int) (string, bool) {
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return string(out), utf8.Valid(out)
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			return "", false
		}
		e := s.b[s.i+1]
		s.i += 2
		if r, ok := simpleEscapes[e]; ok {
			out = append(out, r)
			continue
		}
		if e != 'u' {
			return "", false
		}
		r, ok := s.hex4()
		if !ok {
			return "", false
		}
		out = utf8.AppendRune(out, s.surrogate(r))
	}
	return "", false
}

var simpleEscapes = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// surrogate joins a high surrogate r with the \u escape of a low one after
// it; a lone surrogate is U+FFFD.
func (s *scanner) surrogate(r rune) rune {
	if !utf16.IsSurrogate(r) {
		return r
	}
	if r < 0xDC00 && s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
		save := s.i
		s.i += 2
		if lo, ok := s.hex4(); ok {
			if d := utf16.DecodeRune(r, lo); d != utf8.RuneError {
				return d
			}
		}
		s.i = save
	}
	return utf8.RuneError
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}
