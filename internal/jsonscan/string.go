package jsonscan

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// String is the string a raw JSON value holds, decoded as json.Unmarshal
// decodes one into a string: escapes read, a lone surrogate and each byte
// of invalid UTF-8 made U+FFFD. raw must be a value this package cut out
// (Object, Elements), so valid JSON; ok is false when it is not a string
// (encoding/json would refuse it as one).
func String(raw []byte) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	out := make([]byte, 0, len(inner))
	for i := 0; i < len(inner); {
		c := inner[i]
		switch {
		case c == '\\':
			var r rune
			r, i = unescape(inner, i)
			out = utf8.AppendRune(out, r)
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, n := utf8.DecodeRune(inner[i:])
			out = utf8.AppendRune(out, r) // U+FFFD for a bad byte
			i += n
		}
	}
	return string(out), true
}

// unescape reads the escape at b[i] (valid, as str checked it): the rune
// it spells and the index after it. A high surrogate's \u escape followed
// by a low one's spells one rune; a lone surrogate is U+FFFD.
func unescape(b []byte, i int) (rune, int) {
	switch e := b[i+1]; e {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
	default: // '"', '\\', '/'
		return rune(e), i + 2
	}
	r := hex4(b[i+2 : i+6])
	i += 6
	if !utf16.IsSurrogate(r) {
		return r, i
	}
	if r < 0xDC00 && i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
		if d := utf16.DecodeRune(r, hex4(b[i+2:i+6])); d != utf8.RuneError {
			return d, i + 6
		}
	}
	return utf8.RuneError, i
}

// hex4 is the value of four hex digits.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
