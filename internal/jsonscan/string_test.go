package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzString: String decodes a string value as json.Unmarshal does, and
// refuses any other value (null too, which json.Unmarshal takes as no
// change).
func FuzzString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\nb\"c\\d\/e"`, `"\u00e9\ud83d\ude80"`, `"\ud800x\udc00\ud83d\u0041"`,
		"\"\xff\xe6\x96 \x7f\"", `7`, `null`, `["a"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) || len(bytes.TrimSpace(raw)) != len(raw) {
			return // String reads values Object and Elements cut out
		}
		got, ok := String(raw)
		var want string
		wantOK := json.Unmarshal(raw, &want) == nil && string(raw) != "null"
		if ok != wantOK || got != want {
			t.Fatalf("String(%q) = %q %v, json.Unmarshal %q %v", raw, got, ok, want, wantOK)
		}
	})
}
