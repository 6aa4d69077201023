package search

import "testing"

// FuzzMayHold: MayHold never rules out a line whose message holds the
// query (it may pass lines that do not). Lines and queries are a hostile
// writer's: any bytes, escapes, text parts, runes that fold to ASCII.
func FuzzMayHold(f *testing.F) {
	for _, c := range [][2]string{
		{`{"role":"user","content":"we studied the ZebraFish genome"}`, "zebrafish"},
		{"{\"role\":\"user\",\"content\":\"SY\u017fTEM\"}", "system"},
		{"{\"role\":\"user\",\"content\":\"\u212aEY\"}", "key"},
		{`{"role":"user","content":"\u006bey"}`, "KEY"},
		{`{"role":"assistant","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}`, "hello"},
		{`{"role":"user","content":"我们讨论文件系统"}`, "文件"},
		{`{"role":"user","content":"a\nb \"q\" c\/d"}`, "c/d"},
	} {
		f.Add([]byte(c[0]), c[1])
	}
	f.Fuzz(func(t *testing.T, line []byte, query string) {
		if query == "" {
			return
		}
		q := NewQuery(query)
		m, isMsg := ParseMessage(line)
		if !isMsg {
			return
		}
		start, end, found := q.Find(m.Text)
		if found && !q.MayHold(line) {
			t.Fatalf("MayHold(%q) is false for %q, whose text %q holds it", query, line, m.Text)
		}
		if block := append(append([]byte(`{"role":"user","content":"x"}`+"\n"), line...), '\n'); found && !q.MayHoldIn(block) {
			t.Fatalf("MayHoldIn(%q) is false for a block with %q, whose text %q holds it", query, line, m.Text)
		}
		// Find's byte search for an ASCII query finds what folding finds.
		s, e, ok := q.findFolded(m.Text, 0)
		if s != start || e != end || ok != found {
			t.Fatalf("Find(%q) in %q: %d %d %v, by folding %d %d %v", query, m.Text, start, end, found, s, e, ok)
		}
	})
}

// FuzzScanMessage: the fast reader of lines agrees with encoding/json on
// any bytes.
func FuzzScanMessage(f *testing.F) {
	for _, line := range []string{
		`{"role":"user","content":"plain text, long enough for words"}`,
		`{"role":"assistant","content":[{"type":"text","text":"a\"b\u00e9"}],"ts":"Z"}`,
		"{\"role\":\"user\",\"content\":\"0123456789abcdef\x1f\"}",
		`{"role":"user","content":"\ud83d\ude80 \ud800"}`,
		`{"ROLE":"user","t\u017f":"x","Content":[{"TYPE":"text","Text":"y"},7]}`,
	} {
		f.Add([]byte(line))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got, ok := scanMessage(line)
		want, wantOK := parseMessageJSON(line)
		if ok != wantOK || ok && got != want {
			t.Fatalf("%q:\nscan %+v %v\njson %+v %v", line, got, ok, want, wantOK)
		}
	})
}
