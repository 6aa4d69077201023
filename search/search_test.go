package search

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/ctxfs/ctxfs/proto"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestFold(t *testing.T) {
	same := [][2]string{
		{"HeLLo", "hello"},
		{"ΣΊΣΥΦΟΣ", "σίσυφοσ"},
		{"σίσυφος", "σίσυφοσ"},    // final sigma folds with sigma
		{"\u212Aelvin", "kelvin"}, // Kelvin sign
		{"\u017Fun", "sun"},       // long s
		{"ПРИВЕТ", "привет"},
		{"ǅ", "ǆ"},
		{"𐐀", "𐐨"}, // Deseret, outside the BMP
	}
	for _, c := range same {
		if a, b := FoldString(c[0]), FoldString(c[1]); a != b {
			t.Errorf("Fold(%q) = %q, Fold(%q) = %q", c[0], a, c[1], b)
		}
	}
	for _, s := range []string{"我们今天讨论文件系统", "ファイルシステム", "🚀🔥👍🏽", "한국어", "abc123"} {
		if FoldString(s) != s {
			t.Errorf("Fold(%q) = %q: changed text without case", s, FoldString(s))
		}
	}
}

// TestFoldOrbits: every rune folds to the same rune as each rune of its
// SimpleFold orbit, and folding is idempotent.
func TestFoldOrbits(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r < 0xE000 {
			continue
		}
		f := Fold(r)
		if Fold(f) != f || Fold(unicode.SimpleFold(r)) != f {
			t.Fatalf("rune %U: Fold %U, Fold(Fold) %U, Fold(SimpleFold) %U", r, f, Fold(f), Fold(unicode.SimpleFold(r)))
		}
	}
}

func TestFind(t *testing.T) {
	cases := []struct {
		text, query, want string // want: the matched text; "" for no match
	}{
		{"我们今天讨论文件系统", "文件", "文件"},
		{"我们今天讨论文件系统", "文", "文"},
		{"我们今天讨论文件系统", "讨论文件系统", "讨论文件系统"},
		{"我们今天讨论文件系统", "文档", ""},
		{"これはファイルシステムです", "ファイル", "ファイル"},
		{"これはファイルシステムです", "シス", "シス"},
		{"launch 🚀🔥 now", "🚀🔥", "🚀🔥"},
		{"launch 🚀🔥 now", "🔥", "🔥"},
		{"Say HELLO World", "hello w", "HELLO W"},
		{"ÀB \u212AELVIN x", "kelvin", "\u212AELVIN"}, // the match keeps its own bytes
		{"Straße", "STRASSE", ""},                     // no multi-rune folding
		{"Ärger ärger", "ÄRGER", "Ärger"},
	}
	for _, c := range cases {
		q := NewQuery(c.query)
		s, e, ok := q.Find(c.text)
		got := ""
		if ok {
			got = c.text[s:e]
		}
		if got != c.want {
			t.Errorf("Find(%q in %q) = %q, want %q", c.query, c.text, got, c.want)
		}
	}
}

func TestSnippet(t *testing.T) {
	text := strings.Repeat("前文", 100) + "文件系统" + strings.Repeat("后文", 100)
	q := NewQuery("文件系统")
	s, e, _ := q.Find(text)
	sn := Snippet(text, s, e, SnippetBytes)
	if !utf8.ValidString(sn) || !strings.Contains(sn, "文件系统") || !strings.HasPrefix(sn, "…") || !strings.HasSuffix(sn, "…") {
		t.Fatalf("snippet %q", sn)
	}
	if n := len(sn) - 2*len("…"); n > SnippetBytes || n < SnippetBytes-8 {
		t.Fatalf("snippet of %d bytes: %q", n, sn)
	}
	if got := Snippet("a\nb\tc\x1b[31md", 0, 1, 160); got != "a b c [31md" {
		t.Fatalf("control characters: %q", got)
	}
	long := strings.Repeat("x", 500)
	if got := Snippet("ab"+long+"cd", 2, 502, 160); got != "…"+long+"…" {
		t.Fatalf("a long match is shown whole: %q", got)
	}
}

func TestParseMessage(t *testing.T) {
	cases := []struct {
		line string
		ok   bool
		text string
	}{
		{`{"role":"user","run":"R","content":"hi 文件","ts":"T"}`, true, "hi 文件"},
		{`{"role":"assistant","run":"R","content":[{"type":"text","text":"a"},{"type":"tool_call","id":"c","name":"n","arguments":{}},{"type":"text","text":"b"}],"ts":"T"}`, true, "ab"},
		{`{"role":"assistant","content":"\u6587\u4ef6"}`, true, "文件"}, // escaped as Python writes it
		{`{"role":"tool","run":"R","content":[{"type":"tool_result","content":"文件"}]}`, false, ""},
		{`{"content":"x","role":"tool"}`, false, ""},
		{`{"role":"user","run":7,"content":"typed"}`, true, "typed"},
		{`not json`, false, ""},
		{`{"role":"system","content":"x"}`, false, ""},
		{`{"role":"user","run":"R","content":"appended","ts":"T","uid":1001}`, true, "appended"}, // through the mount
		{`{"role":"assistant","content":[7,{"type":"text","text":5},{"type":"text","text":"ok"}]}`, true, "ok"},
	}
	for _, c := range cases {
		m, ok := ParseMessage([]byte(c.line))
		if ok != c.ok || m.Text != c.text {
			t.Errorf("ParseMessage(%s) = %+v %v", c.line, m, ok)
		}
	}
}

// TestScanMessage: the fast reader of lines agrees with proto.ParseMessage
// (encoding/json, the one text rule) on every line.
func TestScanMessage(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	values := []any{"", "x", 7, -1.5e3, true, nil, []any{1, "a"}, map[string]any{"k": []any{}}}
	for i := range 20000 {
		obj := map[string]any{}
		for _, k := range []string{"role", "run", "ts", "content", "other", "Role", "TS", "t\u017f"} {
			switch rng.IntN(5) {
			case 0, 1:
			case 2:
				obj[k] = values[rng.IntN(len(values))]
			default:
				obj[k] = randomText(rng, rng.IntN(20))
			}
		}
		if rng.IntN(2) == 0 {
			obj["role"] = []string{"user", "assistant"}[rng.IntN(2)]
		}
		if rng.IntN(2) == 0 {
			var parts []any
			for range rng.IntN(4) {
				parts = append(parts, map[string]any{"type": []any{"text", "tool_call", 3}[rng.IntN(3)], "text": randomText(rng, rng.IntN(10)), "x": values[rng.IntN(len(values))]})
			}
			if rng.IntN(4) == 0 {
				parts = append(parts, "a string", 5, nil)
			}
			obj["content"] = parts
		}
		line, _ := json.Marshal(obj)
		if i%3 == 0 { // other spellings of the same JSON
			line = []byte(strings.NewReplacer(`":`, `" : `, `,"`, ` , "`, `\u003c`, `<`, `e`, `\u0065`).Replace(string(line)))
		}
		got, ok := scanMessage(line)
		want, wantOK := parseMessageJSON(line)
		if ok != wantOK || ok && got != want {
			t.Fatalf("%s:\nscan %+v %v\njson %+v %v", line, got, ok, want, wantOK)
		}
	}
	for _, line := range []string{`{"role":"user"`, `{"role":"user",}`, `{"role":"us\x"}`, `{"a":01}`, `{"a":tru}`, `{} x`,
		"{\"role\":\"user\",\"content\":\"a\tb\"}", "{\"role\":\"user\",\"content\":\"0123456789abcdef\x1f\"}",
		"{\"role\":\"user\",\"content\":\"0123456\x00789abcdef\"}", `null`, `[]`, `"role"`,
		"{\"role\":\"user\",\"content\":\"\xff\x7f\x80 \xe6\x96\"}", `{"ROLE":"user","CONTENT":"x"}`,
		`{"role":"user","content":"a\ud800b\udc00\ud83d\ude80\ud83dx"}`} {
		got, ok := scanMessage([]byte(line))
		want, wantOK := parseMessageJSON([]byte(line))
		if ok != wantOK || ok && got != want {
			t.Errorf("%q:\nscan %+v %v\njson %+v %v", line, got, ok, want, wantOK)
		}
	}
	m, ok := scanMessage([]byte(`{"role":"user","content":"\ud83d\ude80 \ud800 \u00e9\n"}`))
	if !ok || m.Text != "🚀 \ufffd é\n" {
		t.Fatalf("escapes: %+v %v", m, ok)
	}
}

// parseMessageJSON is ParseMessage by proto.ParseMessage (encoding/json):
// the reference scanMessage must agree with.
func parseMessageJSON(line []byte) (m Message, ok bool) {
	pm, err := proto.ParseMessage(line)
	if err != nil || pm.Role != "user" && pm.Role != "assistant" {
		return m, false
	}
	return Message{Role: pm.Role, Run: pm.Run, TS: pm.TS, Text: pm.Text()}, true
}

func TestEachLine(t *testing.T) {
	long := `{"role":"user","content":"` + strings.Repeat("x", MaxLine) + `"}`
	log := "a\n" + long + "\nb\n" + "torn"
	var got []string
	var ends []int64
	end, err := EachLine(strings.NewReader(log), 0, int64(len(log)), func(line []byte, e int64) error {
		got = append(got, string(line))
		ends = append(ends, e)
		return nil
	})
	if err != nil || strings.Join(got, ",") != "a,b" || end != int64(len(log)-len("torn")) {
		t.Fatalf("lines %q end %d err %v", got, end, err)
	}
	if ends[0] != 2 || ends[1] != int64(len(log)-len("torn")) {
		t.Fatalf("ends %v", ends)
	}
	// From the middle, up to a bound.
	got = nil
	EachLine(strings.NewReader(log), 2+int64(len(long))+1, int64(len(log)), func(line []byte, _ int64) error {
		got = append(got, string(line))
		return nil
	})
	if strings.Join(got, ",") != "b" {
		t.Fatalf("from the middle: %q", got)
	}
}

// TestEachLineMay: the blocks may rules out are skipped whole, every other
// line is passed as EachLine passes it, and how far the lines were read
// is the same; blocks are whole lines, each asked about once.
func TestEachLineMay(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, "%d %s\n", i, strings.Repeat("x", rng.IntN(200)))
		if i == 1500 {
			b.WriteString(strings.Repeat("y", 200<<10) + "\n") // longer than the reader's buffer
		}
	}
	b.WriteString("torn")
	log := b.String()
	lines := func(may func([]byte) bool) (got []string, end int64) {
		end, err := EachLineMay(strings.NewReader(log), 0, int64(len(log)), may, func(line []byte, e int64) error {
			if !strings.HasSuffix(log[:e], string(line)+"\n") {
				t.Fatalf("line %.20q does not end at %d", line, e)
			}
			got = append(got, string(line))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, end
	}
	all, allEnd := lines(nil)
	var blocks []string
	some, someEnd := lines(func(block []byte) bool {
		if len(block) == 0 || block[len(block)-1] != '\n' || !strings.Contains(log, string(block)) {
			t.Fatalf("block of %d bytes is not whole lines of the log", len(block))
		}
		blocks = append(blocks, string(block))
		return strings.Contains(string(block), "\n2000 ")
	})
	if allEnd != int64(len(log)-len("torn")) || someEnd != allEnd || len(all) != 3001 {
		t.Fatalf("%d lines to %d; with may to %d", len(all), allEnd, someEnd)
	}
	if len(blocks) < 3 || len(some) >= len(all) || len(some) == 0 {
		t.Fatalf("%d blocks asked, %d of %d lines passed", len(blocks), len(some), len(all))
	}
	skipped := map[string]bool{}
	for _, bl := range blocks {
		if !strings.Contains(bl, "\n2000 ") {
			for _, l := range strings.Split(strings.TrimSuffix(bl, "\n"), "\n") {
				skipped[l] = true
			}
		}
	}
	j := 0
	for _, l := range all {
		if skipped[l] {
			continue
		}
		if j >= len(some) || some[j] != l {
			t.Fatalf("line %.20q not passed", l)
		}
		j++
	}
	if j != len(some) {
		t.Fatalf("%d lines passed that a skipped block held", len(some)-j)
	}
}

func TestSegmentEncoding(t *testing.T) {
	log := messageLog([]string{"我们今天讨论文件系统", "hello"})
	s, err := Extend(strings.NewReader(log), NewSegment([16]byte{1}, 0), int64(len(log)), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := s.Encode()
	back, err := DecodeSegment(b)
	if err != nil || !bytes.Equal(back.Encode(), b) {
		t.Fatalf("decode: %v", err)
	}
	h, err := ParseHeader(b, int64(len(b)))
	if err != nil || h.Start != 0 || h.End != s.End || h.Tail != s.Tail || h.Blocks != s.Filter.compact().Blocks() || !h.Fits(strings.NewReader(log), [16]byte{1}, int64(len(log))) {
		t.Fatalf("header %+v %v", h, err)
	}
	if h.Fits(strings.NewReader(log), [16]byte{2}, int64(len(log))) {
		t.Fatal("another session's segment fits")
	}
	other := strings.Replace(log, "hello", "jello", 1)
	if h.Fits(strings.NewReader(other), [16]byte{1}, int64(len(other))) {
		t.Fatal("a segment fits a log with other bytes at its end")
	}
	if h.Fits(strings.NewReader(log[:len(log)-1]), [16]byte{1}, int64(len(log)-1)) {
		t.Fatal("a segment fits a log cut short")
	}
	for _, q := range []string{"文件", "系", "HELLO", "论文件系"} {
		keys := NewQuery(q).Keys()
		on, err := h.Probe(bytes.NewReader(b), keys)
		if err != nil || !on || !s.HasAll(keys) {
			t.Errorf("probe %q: %v %v", q, on, err)
		}
	}
	for i := range b {
		bad := append([]byte(nil), b...)
		bad[i] ^= 0x40
		if _, err := DecodeSegment(bad); err == nil {
			t.Fatalf("a flipped byte at %d decodes", i)
		}
	}
	if _, err := ParseHeader(b, int64(len(b))+1); err == nil {
		t.Fatal("a header with another file size parses")
	}
}

// TestNoFalseNegatives is the index's one promise: every substring of a
// message's text, in any case, is found in a segment the filters keep,
// across segment closes and filter regrowth, and building the index in
// steps gives the same segments as building it at once.
func TestNoFalseNegatives(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var texts []string
	for range 6000 {
		texts = append(texts, randomText(rng, 1+rng.IntN(300)))
	}
	log, offsets := messageLogAt(texts)
	segs := build(t, log, int64(len(log)))
	filled := 0 // segments closed by their filter, not by MaxSegmentBytes
	for _, s := range segs[:len(segs)-1] {
		if s.End-s.Start < MaxSegmentBytes {
			filled++
		}
	}
	if len(segs) < 3 || filled == 0 {
		t.Fatalf("%d segments, %d closed full: the test must cross segment closes, some by a full filter", len(segs), filled)
	}
	stepped := buildInSteps(t, log, rng)
	if len(stepped) != len(segs) {
		t.Fatalf("in steps: %d segments, at once %d", len(stepped), len(segs))
	}
	for i := range segs {
		if !bytes.Equal(stepped[i].Encode(), segs[i].Encode()) {
			t.Fatalf("segment %d differs when built in steps", i)
		}
	}
	for range 20000 {
		i := rng.IntN(len(texts))
		q := randomCase(rng, randomSubstring(rng, texts[i]))
		if !found(segs, offsets[i], q, texts[i]) {
			t.Fatalf("query %q from message %d (%q) not found", q, i, texts[i])
		}
		line := log[offsets[i]:]
		if !NewQuery(q).MayHold([]byte(line[:strings.IndexByte(line, '\n')])) {
			t.Fatalf("MayHold(%q) is false for message %d (%q)", q, i, texts[i])
		}
	}
}

func TestMayHold(t *testing.T) {
	cases := []struct {
		line, query string
		may         bool
	}{
		{`{"role":"user","content":"我们讨论文件系统"}`, "文件", true},
		{`{"role":"user","content":"我们讨论系统"}`, "文件", false},
		{`{"role":"user","content":"\u6587\u4ef6"}`, "文件", true}, // escaped: cannot tell
		{`{"role":"user","content":"line\none \"q\""}`, "文件", false},
		{`{"role":"user","content":"HELLO"}`, "hello", true},
		{`{"role":"user","content":"\u212Aelvin"}`, "kelvin", true},
		{`{"role":"user","content":"Kelvin"}`, "KELVIN", true}, // the Kelvin sign as itself
		{`{"role":"user","content":"a\nb"}`, "a\nb", true},
		{`{"role":"user","content":"abc"}`, "xyz", false},
		{`{"role":"user","content":"olleh"}`, "hello", false}, // every rune, not the text
		{`{"role":"assistant","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}`, "hello", true},
		{`{"role":"assistant","content":[{"type":"text","text":"hel"}],"ts":"Z"}`, "hello", false},
		{`{"role":"assistant","content":[{"type":"text","tEXt":"hel"},{"type":"text","TEXT":"lo"}]}`, "ll", true}, // keys in any case
		// A plain ASCII query: its bytes are looked for in the raw line.
		{`{"role":"user","content":"we studied the ZebraFish genome","ts":"2026-01-01T00:00:00.000Z"}`, "zebrafish", true},
		{`{"role":"user","content":"zebra fish","ts":"2026-01-01T00:00:00.000Z"}`, "zebrafish", false},
		{`{"role":"user","content":"Zebrafis"}`, "zebrafish", false},        // cut by the line's end
		{`{"role":"user","content":"sy\u017ftem"}`, "system", true},         // escaped
		{"{\"role\":\"user\",\"content\":\"SY\u017fTEM\"}", "system", true}, // LONG S as itself folds to s
		{"{\"role\":\"user\",\"content\":\"\u212aEY\"}", "key", true},       // KELVIN SIGN as itself
		{"{\"role\":\"user\",\"content\":\"\u212aEX\"}", "key", false},
		{`{"role":"user","content":"a b"}`, "A B", true},
		{`{"role":"user","content":"x"}`, `"content"`, true}, // not plain: the general test
		{`ZZZ`, "zzzz", false},
		{`zzzz`, "ZZZZ", true},
	}
	for _, c := range cases {
		if got := NewQuery(c.query).MayHold([]byte(c.line)); got != c.may {
			t.Errorf("MayHold(%q, %s) = %v", c.query, c.line, got)
		}
	}
}

// TestFalsePositives: a full filter passes few keys it does not hold.
func TestFalsePositives(t *testing.T) {
	f := NewFilter(MinBlocks)
	rng := rand.New(rand.NewPCG(3, 4))
	for !f.Full() {
		f.Add(rng.Uint64())
	}
	fp := 0
	const n = 200000
	for range n {
		if f.Has(rng.Uint64()) {
			fp++
		}
	}
	if rate := float64(fp) / n; rate > 0.02 {
		t.Fatalf("false positive rate %.4f at the fill limit", rate)
	}
}

// build indexes log from scratch; it returns every segment, the last one
// included.
func build(t *testing.T, log string, size int64) []*Segment {
	t.Helper()
	var segs []*Segment
	last, err := Extend(strings.NewReader(log), NewSegment([16]byte{9}, 0), size, func(s *Segment) error {
		segs = append(segs, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return append(segs, last)
}

// buildInSteps indexes log in random steps, reloading the last segment
// from its encoding each time, as a query after appends does.
func buildInSteps(t *testing.T, log string, rng *rand.Rand) []*Segment {
	var segs []*Segment
	last := NewSegment([16]byte{9}, 0)
	for size := int64(0); size < int64(len(log)); {
		size = min(int64(len(log)), size+int64(rng.IntN(40000)))
		var err error
		if last, err = DecodeSegment(last.Encode()); err != nil {
			t.Fatal(err)
		}
		last, err = Extend(strings.NewReader(log[:size]), last, size, func(s *Segment) error {
			segs = append(segs, s)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return append(segs, last)
}

// found reports whether the segment that holds the message at offset
// passes the filter for q, and whether the verifying match finds q in text.
func found(segs []*Segment, offset int64, q, text string) bool {
	query := NewQuery(q)
	for _, s := range segs {
		if s.Start <= offset && offset < s.End {
			_, _, hit := query.Find(text)
			return s.HasAll(query.Keys()) && hit
		}
	}
	return false
}

// alphabet mixes scripts, cases, wide runes and emoji; the CJK block is
// large so that filters fill up and segments close.
var alphabet = []rune("aAbBkKzZ \u212A\u017FσΣςπΠжЖ我们今天讨论文件系统ファイルシステム한국🚀🔥👍🏽é\u0301")

func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		switch rng.IntN(12) {
		case 0, 1, 2, 3:
			b.WriteRune(rune(0x4E00 + rng.IntN(0x5000))) // any CJK ideograph
		case 4:
			r := rune(rng.IntN(unicode.MaxRune + 1)) // any rune at all
			if !utf8.ValidRune(r) {
				r = 'x'
			}
			b.WriteRune(r)
		default:
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
	}
	return b.String()
}

func randomSubstring(rng *rand.Rand, s string) string {
	rs := []rune(s)
	i := rng.IntN(len(rs))
	n := 1 + rng.IntN(min(len(rs)-i, 8))
	return string(rs[i : i+n])
}

// randomCase swaps each rune for another of its case orbit, at random.
func randomCase(rng *rand.Rand, s string) string {
	var b strings.Builder
	for _, r := range s {
		for range rng.IntN(3) {
			r = unicode.SimpleFold(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// messageLog is a messages.jsonl of user and assistant messages (every
// third one a tool message, which is not indexed).
func messageLog(texts []string) string {
	log, _ := messageLogAt(texts)
	return log
}

// messageLogAt is messageLog with the offset of each message's line.
func messageLogAt(texts []string) (string, []int64) {
	var b strings.Builder
	var offsets []int64
	for i, t := range texts {
		offsets = append(offsets, int64(b.Len()))
		role := []string{"user", "assistant"}[i%2]
		content, _ := json.Marshal(t)
		if i%2 == 1 {
			content, _ = json.Marshal([]map[string]string{{"type": "text", "text": t}})
		}
		fmt.Fprintf(&b, `{"role":%q,"run":"r%d","content":%s,"ts":"T"}`+"\n", role, i, content)
		if i%3 == 0 {
			fmt.Fprintf(&b, `{"role":"tool","run":"r%d","content":[{"type":"tool_result","tool_call_id":"c","content":"zzz"}]}`+"\n", i)
		}
	}
	return b.String(), offsets
}

// TestASCIIQueryEach: the matches of a plain ASCII query are found in
// order, overlapping ones too, whether the anchor's comparisons stay
// cheap or the search goes on in linear time (lines dense with the
// anchor), as a naive search finds them.
func TestASCIIQueryEach(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		q := randomFrom(rng, "abA", 1+rng.IntN(6))
		b := randomFrom(rng, "abAB", rng.IntN(1000))
		if i%2 == 1 { // long queries in text dense with their anchor
			q = randomFrom(rng, "aaaaaaaAb", 8+rng.IntN(40))
			b = randomFrom(rng, "aaaaaaaaAb", rng.IntN(2000))
		}
		a := newASCIIQuery(strings.ToLower(q))
		var got []int
		a.each([]byte(b), func(i int) bool { got = append(got, i); return true })
		var want []int
		for j := 0; j+len(q) <= len(b); j++ {
			if strings.EqualFold(b[j:j+len(q)], q) {
				want = append(want, j)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q in %q: %v, want %v", q, b, got, want)
		}
	}
}

func randomFrom(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// TestField: a match frame's run and ts are kept up to FieldBytes, and
// cut at a rune boundary with "…" beyond.
func TestField(t *testing.T) {
	short := strings.Repeat("a", FieldBytes)
	if Field(short) != short {
		t.Errorf("Field cut %d bytes", FieldBytes)
	}
	if got := Field(strings.Repeat("a", 1<<20)); got != short+"…" {
		t.Errorf("Field of 1 MiB: %d bytes", len(got))
	}
	got := Field("a" + strings.Repeat("é", FieldBytes))
	if !utf8.ValidString(got) || len(got) > FieldBytes+len("…") || !strings.HasSuffix(got, "é…") {
		t.Errorf("Field of a 2-byte rune text: %q", got)
	}
}
