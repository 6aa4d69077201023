package search

import (
	"bytes"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Query is a parsed query: its folded text and the filter keys a segment
// holding a match must have.
type Query struct {
	folded string
	keys   []uint64
	runes  [][][]byte   // runeForms: what MayHold looks for
	plain  bool         // no rune a JSON writer spells with a simple escape
	ascii  *asciiQuery  // MayHold's byte search, for a plain ASCII query
	long   *linearQuery // findFolded's search, for a query over longQueryBytes
}

// NewQuery parses q (non-empty; the request parser checked its size).
func NewQuery(q string) *Query {
	folded := FoldString(q)
	plain := !strings.ContainsFunc(folded, jsonSimpleEscaped)
	query := &Query{folded: folded, keys: queryKeys([]rune(folded)), runes: runeForms(folded), plain: plain}
	if plain {
		query.ascii = newASCIIQuery(folded)
	}
	if len(folded) > longQueryBytes {
		long := newLinearQuery(folded)
		query.long = &long
	}
	return query
}

// Keys are the filter keys of the query.
func (q *Query) Keys() []uint64 { return q.keys }

// Find returns the byte range in text of its first match of q, ignoring
// case (Fold), and whether there is one.
func (q *Query) Find(text string) (start, end int, ok bool) {
	return q.FindFrom(text, 0)
}

// FindFrom is Find for the first match that starts at byte from or later
// (from is a rune boundary of text).
func (q *Query) FindFrom(text string, from int) (start, end int, ok bool) {
	if q.folded == "" || from > len(text) {
		return 0, 0, false
	}
	if q.ascii != nil {
		if i, ok := q.ascii.find(text[from:]); ok {
			if i < 0 {
				return 0, 0, false
			}
			return from + i, from + i + len(q.folded), true
		}
	}
	return q.findFolded(text, from)
}

// findFolded is FindFrom by folding text: for any query and text.
func (q *Query) findFolded(text string, from int) (start, end int, ok bool) {
	folded, asIs := foldText(text[from:])
	var i int
	if q.long != nil {
		i = q.long.index(folded)
	} else {
		i = strings.Index(folded, q.folded)
	}
	if i < 0 {
		return 0, 0, false
	}
	if asIs { // folding changed no byte: offsets are the same
		return from + i, from + i + len(q.folded), true
	}
	start = from + original(text[from:], i)
	end = start + original(text[start:], len(q.folded))
	return start, end, true
}

// foldText folds text; asIs reports that it came out byte for byte the
// same (the common case, checked first without copying: ASCII lower case,
// most scripts without case).
func foldText(text string) (string, bool) {
	for i, r := range text {
		if r == utf8.RuneError || Fold(r) != r {
			return text[:i] + FoldString(text[i:]), false
		}
	}
	return text, true
}

// original is the byte offset in text that the byte offset off of
// FoldString(text) corresponds to: folding keeps runes, not bytes.
func original(text string, off int) int {
	n := 0 // bytes of folded text passed
	for i, r := range text {
		if n >= off {
			return i
		}
		n += utf8.RuneLen(Fold(r))
	}
	return len(text)
}

// SnippetBytes is about how much text a snippet shows around a match.
const SnippetBytes = 160

// Snippet is the text around text[start:end] (a match), about width bytes
// in all, cut at rune boundaries, with "…" where it was cut and control
// characters (new lines, tabs, escapes) shown as spaces, so that it is one
// safe line. A match longer than width is shown whole.
func Snippet(text string, start, end, width int) string {
	room := max(0, width-(end-start))
	from := start - room/2
	to := end + room - (start - max(0, from))
	from, to = max(0, from), min(len(text), to)
	for from > 0 && !utf8.RuneStart(text[from]) {
		from++
	}
	for to < len(text) && !utf8.RuneStart(text[to]) {
		to--
	}
	var b strings.Builder
	if from > 0 {
		b.WriteString("…")
	}
	b.WriteString(OneLine(text[from:to]))
	if to < len(text) {
		b.WriteString("…")
	}
	return b.String()
}

// FieldBytes bounds a match frame's run and ts. A line appended through
// the mount may make either a string of up to 1 MiB, and a search runs
// FrameRoom (64) frames ahead of a reader that does not read: two such
// searches of one uid held 212 MiB of the server.
const FieldBytes = 128

// Field is s when it is at most FieldBytes bytes, else its first
// FieldBytes bytes or fewer (cut at a rune boundary), copied, and "…".
func Field(s string) string {
	if len(s) <= FieldBytes {
		return s
	}
	cut := FieldBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…" // a new string: nothing of s is kept
}

// OneLine replaces control characters (C0, DEL, C1) and invalid bytes
// with spaces.
func OneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, s)
}

// MayHold is a fast, safe test of a raw messages.jsonl line before it is
// decoded: false only when the line's text cannot hold the query.
//
// Unless a JSON \u escape could spell it, every rune of a match is in the
// line as UTF-8 (in some case); the simple escapes (\n, \", …) spell only
// runes the test leaves out, and joining text parts invents no rune. For
// a query without such runes, a line whose text is one string (fewer than
// two text parts: a text part has "text" twice, as its type and its key,
// the key in any case, as encoding/json reads keys) holds the match
// itself, byte for byte up to case.
func (q *Query) MayHold(line []byte) bool {
	if bytes.Contains(line, backslashU) {
		return true
	}
	if a := q.ascii; a != nil && !containsAny(line, a.exotic) {
		return a.index(line) >= 0 || textParts(line) >= 4
	}
	for _, forms := range q.runes {
		if !containsAny(line, forms) {
			return false
		}
	}
	if !q.plain || textParts(line) >= 4 {
		return true
	}
	folded, _ := foldText(string(line))
	return strings.Contains(folded, q.folded)
}

// MayHoldIn is MayHold for a block of whole lines at once: false only
// when no line of it can hold the query. It looks at the block as MayHold
// looks at a line; a match it finds may cross lines, which only makes it
// pass a block that does not hold one.
func (q *Query) MayHoldIn(block []byte) bool {
	if bytes.Contains(block, backslashU) {
		return true
	}
	if a := q.ascii; a != nil && !containsAny(block, a.exotic) {
		return a.index(block) >= 0 || hasPartsLine(block)
	}
	for _, forms := range q.runes {
		if !containsAny(block, forms) {
			return false
		}
	}
	return true
}

// hasPartsLine reports whether a line of block has two text parts or
// more (quotedText four times or more), whose text MayHold cannot judge
// from the raw bytes.
func hasPartsLine(block []byte) bool {
	lineEnd, n := -1, 0 // the end of the line of the last occurrence, and its count there
	found := false
	quotedText.each(block, func(i int) bool {
		if i > lineEnd {
			lineEnd, n = len(block), 0
			if k := bytes.IndexByte(block[i:], '\n'); k >= 0 {
				lineEnd = i + k
			}
		}
		n++
		found = n >= 4
		return !found
	})
	return found
}

// textParts counts quotedText in line, up to 4.
func textParts(line []byte) int {
	n := 0
	quotedText.each(line, func(int) bool { n++; return n < 4 })
	return n
}

func containsAny(line []byte, forms [][]byte) bool {
	for _, f := range forms {
		if bytes.Contains(line, f) {
			return true
		}
	}
	return false
}

// quotedText is "text" as a key or a type's value, in any ASCII case:
// encoding/json takes "TEXT" for the key "text" (and no other rune folds
// to a letter of it).
var quotedText = newASCIIQuery(`"text"`)

var backslashU = []byte(`\u`)

// runeForms are, for the distinct runes of a query that a JSON line holds
// as themselves, the UTF-8 of every rune that folds to it: what MayHold
// looks for. Non-ASCII runes come first (they rule out more lines), and at
// most 8 are kept (any subset is safe).
func runeForms(folded string) [][][]byte {
	seen := map[rune]bool{}
	var rs []rune
	for _, r := range folded {
		if !seen[r] && !jsonSimpleEscaped(r) {
			seen[r] = true
			rs = append(rs, r)
		}
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i] >= utf8.RuneSelf && rs[j] < utf8.RuneSelf })
	var out [][][]byte
	for _, r := range rs[:min(len(rs), 8)] {
		forms := [][]byte{utf8.AppendRune(nil, r)}
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			forms = append(forms, utf8.AppendRune(nil, f))
		}
		out = append(out, forms)
	}
	return out
}

// jsonSimpleEscaped: runes a JSON writer may spell with a two-character
// escape (and control characters, which it must escape).
func jsonSimpleEscaped(r rune) bool {
	return r < 0x20 || r == '"' || r == '\\' || r == '/' || r == utf8.RuneError
}
