// Package jsonscan reads a JSON log line in one pass: it checks that the
// line is JSON exactly as encoding/json checks it, and cuts out the raw
// values of the members a reader asks for, matching keys to names exactly
// as encoding/json matches keys to a struct's fields. It stands in for
// json.Unmarshal into a struct of json.RawMessage fields, which scans a
// line twice (its validity check, then its decoding) and copies every
// value it keeps (docs/benchmarks.md#trajectory); the values here are
// slices of the line. It also writes strings and raw values byte for byte
// as encoding/json writes them (AppendString, AppendCompact), without its
// reflection. It never decides what a value means: its callers (the
// trajectory export, search) do.
package jsonscan

import (
	"encoding/binary"
	"encoding/json"
	"unicode"
	"unicode/utf8"
)

// maxDepth is encoding/json's limit on nested objects and arrays: a value
// nested deeper is not valid to it.
const maxDepth = 10000

// Fields are the member names a reader reads, as encoding/json names the
// fields of a struct (a field's name, or its tag's).
type Fields struct {
	folded [][]byte // each name as foldName makes it
}

// NewFields is the set of names. Two names that match the same keys
// (equal but for case) would need encoding/json's preference for the
// exact one; no reader has them, so they are refused.
func NewFields(names ...string) *Fields {
	f := &Fields{}
	for _, n := range names {
		k := foldName([]byte(n))
		for _, o := range f.folded {
			if string(o) == string(k) {
				panic("jsonscan: names " + n + " and another match the same keys")
			}
		}
		f.folded = append(f.folded, k)
	}
	return f
}

// Len is the number of names.
func (f *Fields) Len() int { return len(f.folded) }

// Object reads b, which must be one JSON object with at most white space
// around it: vals (of f.Len() elements) gets, for each name, the raw value
// of the last member whose key matches it, a slice of b, or nil when no
// key does. It reports false, leaving vals unspecified, exactly when
// json.Unmarshal of b into a struct of json.RawMessage fields fails or b
// is JSON null.
func (f *Fields) Object(b []byte, vals [][]byte) bool {
	clear(vals)
	ok, _ := Members(b, func(key, val []byte) {
		if k := f.match(key); k >= 0 {
			vals[k] = val
		}
	})
	return ok
}

// Members reads b, which must be one JSON object with at most white space
// around it, and calls each with each member's raw key (a JSON string,
// quotes and all: String decodes it) and raw value, slices of b, in
// order. It reports whether b is one valid object (json.Valid, and an
// object); when it is not, at is the offset where reading stopped, and
// each may have been called for the members before it.
func Members(b []byte, each func(key, val []byte)) (ok bool, at int) {
	s := scanner{b: b}
	s.space()
	if !s.object(1, each) {
		return false, s.i
	}
	s.space()
	return s.i == len(b), s.i
}

// Elements reads b, which must be one JSON array with at most white space
// around it, and calls each with each element's raw value (a slice of b),
// in order, as it reads them. It reports false exactly when b is not
// valid JSON (json.Valid) or not an array; each may have been called for
// the elements before the fault.
func Elements(b []byte, each func(elem []byte)) bool {
	s := scanner{b: b}
	s.space()
	if !s.array(1, each) {
		return false
	}
	s.space()
	return s.i == len(b)
}

// scanner is a position in a JSON text.
type scanner struct {
	b []byte
	i int
}

// space skips white space as JSON defines it.
func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// is consumes c if it is next.
func (s *scanner) is(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// value reads one value at nesting depth (of its container).
func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth+1, nil)
	case c == '[':
		return s.array(depth+1, nil)
	case c == '"':
		return s.str()
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

// object reads an object that is at nesting depth, calling each (if not
// nil) with each member's raw key and value.
func (s *scanner) object(depth int, each func(key, val []byte)) bool {
	if depth > maxDepth || !s.is('{') {
		return false
	}
	s.space()
	if s.is('}') {
		return true
	}
	for {
		start := s.i
		if !s.str() {
			return false
		}
		key := s.b[start:s.i:s.i]
		s.space()
		if !s.is(':') {
			return false
		}
		s.space()
		start = s.i
		if !s.value(depth) {
			return false
		}
		if each != nil {
			each(key, s.b[start:s.i:s.i])
		}
		s.space()
		if s.is('}') {
			return true
		}
		if !s.is(',') {
			return false
		}
		s.space()
	}
}

// array reads an array that is at nesting depth, calling each (if not
// nil) with each element.
func (s *scanner) array(depth int, each func([]byte)) bool {
	if depth > maxDepth || !s.is('[') {
		return false
	}
	s.space()
	if s.is(']') {
		return true
	}
	for {
		start := s.i
		if !s.value(depth) {
			return false
		}
		if each != nil {
			each(s.b[start:s.i:s.i])
		}
		s.space()
		if s.is(']') {
			return true
		}
		if !s.is(',') {
			return false
		}
		s.space()
	}
}

// str reads a string: no control character in it, and only the escapes
// JSON has. Most of a log is the text of strings: it is read eight bytes
// at a time while none of them ends the string, escapes or is a control
// character (special).
func (s *scanner) str() bool {
	if !s.is('"') {
		return false
	}
	b, i := s.b, s.i
	for {
		for i+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			return false
		}
		c := b[i]
		i++
		switch {
		case c == '"':
			s.i = i
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if i >= len(b) {
				return false
			}
			e := b[i]
			i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 0; k < 4; k++ {
					if i >= len(b) || !isHex(b[i]) {
						return false
					}
					i++
				}
			default:
				return false
			}
		}
	}
}

// special says whether any of the eight bytes in x is a quote, a
// backslash or below 0x20: the classic tests for a zero byte (of x with
// the quote or the backslash cleared) and for a byte below n, each exact
// in saying whether there is one.
func special(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	return ((x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs)&highs != 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	s.is('-')
	switch {
	case s.is('0'):
	case s.digits():
	default:
		return false
	}
	if s.is('.') && !s.digits() {
		return false
	}
	if s.is('e') || s.is('E') {
		if !s.is('+') {
			s.is('-')
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits reads one digit or more.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// match is the index of the name that key (a JSON string, quotes and
// all) matches, or -1. encoding/json matches a key unquoted, exactly or
// else as foldName folds it; NewFields made sure that at most one name
// folds like any key, so a match by folding is the match.
func (f *Fields) match(key []byte) int {
	inner := key[1 : len(key)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if !plain {
		var k string
		if json.Unmarshal(key, &k) != nil {
			return -1
		}
		folded := foldName([]byte(k))
		for i, n := range f.folded {
			if string(n) == string(folded) {
				return i
			}
		}
		return -1
	}
next:
	for i, n := range f.folded {
		if len(n) != len(inner) {
			continue
		}
		for j, c := range inner {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			if c != n[j] {
				continue next
			}
		}
		return i
	}
	return -1
}

// foldName is encoding/json's folding of a key or a field's name: ASCII
// letters in upper case, any other rune as the smallest of its fold set.
func foldName(in []byte) []byte {
	var out []byte
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// AppendCompact appends the JSON text src to dst without its white space,
// as encoding/json writes a json.RawMessage when it does not escape HTML;
// false, with dst as it was, when src is not valid JSON (json.Valid), on
// which encoding/json fails.
func AppendCompact(dst, src []byte) ([]byte, bool) {
	s := scanner{b: src}
	s.space()
	if !s.value(0) {
		return dst, false
	}
	s.space()
	if s.i != len(src) {
		return dst, false
	}
	inString := false
	start := 0
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case inString && c == '\\':
			i++ // the escaped byte, which may be a quote
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			dst = append(dst, src[start:i]...)
			start = i + 1
		}
	}
	return append(dst, src[start:]...), true
}

// AppendString appends s quoted as encoding/json quotes a string when it
// does not escape HTML: '"', '\\' and control characters escaped (\b, \f,
// \n, \r, \t by name, the others as \u00XX), each byte of invalid UTF-8 as
// \ufffd, U+2028 and U+2029 as \u2028 and \u2029, all else as it is.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look: a run of text.
		for i+8 <= len(s) && !specialOrHigh(uint64(s[i])|uint64(s[i+1])<<8|uint64(s[i+2])<<16|uint64(s[i+3])<<24|
			uint64(s[i+4])<<32|uint64(s[i+5])<<40|uint64(s[i+6])<<48|uint64(s[i+7])<<56) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}

// specialOrHigh says whether any of the eight bytes in x is special or
// not ASCII.
func specialOrHigh(x uint64) bool {
	return x&0x8080808080808080 != 0 || special(x)
}
