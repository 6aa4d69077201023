package provider

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// The redactor passes everything but the key on, however the text is cut
// into pieces, and holds nothing back once flushed.
func TestRedactor(t *testing.T) {
	t.Parallel()
	const key = "sk-ab-sk-abc"
	texts := []string{
		"plain text", key, "x" + key + key + "y", "sk-ab-sk-ab-sk-abc!", "sk-ab", "ends with sk-ab-sk-a",
		"s" + key[:len(key)-1] + key,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, text := range texts {
		want := strings.ReplaceAll(text, key, redacted)
		for range 200 {
			r := redactor{key: key}
			var out strings.Builder
			for rest := text; rest != ""; {
				n := 1 + rng.IntN(len(rest))
				piece := r.add(rest[:n])
				if strings.Contains(piece, key) {
					t.Fatalf("%q: the key passed in a piece", text)
				}
				out.WriteString(piece)
				rest = rest[n:]
			}
			out.WriteString(r.flush())
			if out.String() != want || r.all.String() != want {
				t.Fatalf("%q: passed %q, kept %q, want %q", text, out.String(), r.all.String(), want)
			}
		}
	}
}

// Without a key nothing is held back.
func TestRedactorNoKey(t *testing.T) {
	t.Parallel()
	r := redactor{}
	if got := r.add("sk-"); got != "sk-" {
		t.Errorf("%q", got)
	}
}
