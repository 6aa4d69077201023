package window

import (
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/agent/modelapi"
)

func TestTokens(t *testing.T) {
	for _, c := range []struct {
		s    string
		want int
	}{{"", 0}, {"a", 1}, {"abc", 1}, {"abcd", 2}, {"日本", 3}, {strings.Repeat("x", 3000), 1000}} {
		if got := Tokens(c.s); got != c.want {
			t.Errorf("Tokens(%q) = %d, want %d", c.s, got, c.want)
		}
	}
}

// TestTokensEveryMix: the count read eight bytes at a time is the count
// read byte by byte, for every length to 40 and every place of high bytes.
func TestTokensEveryMix(t *testing.T) {
	byByte := func(s string) int {
		ascii, other := 0, 0
		for i := 0; i < len(s); i++ {
			if s[i] < 0x80 {
				ascii++
			} else {
				other++
			}
		}
		return (ascii+2)/3 + (other+1)/2
	}
	for n := 0; n <= 40; n++ {
		for seed := range 64 {
			b := []byte(strings.Repeat("a", n))
			for i := range b {
				if (i*7+seed*13)%(seed%5+2) == 0 {
					b[i] = byte(0x80 + (i+seed)%128)
				}
			}
			if got, want := Tokens(string(b)), byByte(string(b)); got != want {
				t.Fatalf("Tokens(%q) = %d, byte by byte %d", b, got, want)
			}
		}
	}
}

func TestLimitsOf(t *testing.T) {
	for _, c := range []struct {
		id                string
		win, compact, max int
		want              Limits
	}{
		{"gpt-4o-mini", 0, 0, 0, Limits{128000, 4096, 123904}},
		{"anthropic/claude-sonnet-4", 0, 0, 1000, Limits{200000, 1000, 199000}},
		{"some-local-model:7b", 0, 50000, 0, Limits{128000, 4096, 50000}},
		{"x", 2000, 5000, 1000, Limits{2000, 1000, 1000}},
		{"x", 1000, 0, 0, Limits{1000, 250, 750}},
	} {
		if got := LimitsOf(c.id, c.win, c.compact, c.max); got != c.want {
			t.Errorf("LimitsOf(%q, %d, %d, %d) = %+v, want %+v", c.id, c.win, c.compact, c.max, got, c.want)
		}
	}
}

func user(s string) modelapi.Turn { return modelapi.Turn{Role: modelapi.RoleUser, Text: s} }

// TestCutKeepsPairs: a cut never parts a tool result from its call, and
// falls at a user turn when one fits.
func TestCutKeepsPairs(t *testing.T) {
	big := strings.Repeat("x", 300) // 100 tokens
	turns := []modelapi.Turn{
		user(big),
		{Role: modelapi.RoleAssistant, ToolCalls: []modelapi.ToolCall{{ID: "c1", Name: "fs.read", Arguments: "{}"}}},
		{Role: modelapi.RoleTool, ToolCallID: "c1", Text: big},
		{Role: modelapi.RoleAssistant, Text: big},
		user(big),
		{Role: modelapi.RoleAssistant, ToolCalls: []modelapi.ToolCall{{ID: "c2", Name: "fs.read", Arguments: "{}"}}},
		{Role: modelapi.RoleTool, ToolCallID: "c2", Text: big},
	}
	all := 0
	for _, tt := range turns {
		all += TurnTokens(tt)
	}
	if i, ok := Cut(turns, 0, all, all); !ok || i != 0 {
		t.Fatalf("a conversation that fits is cut at %d", i)
	}
	// Room for the last three turns: the user turn at 4 starts them.
	last3 := TurnTokens(turns[4]) + TurnTokens(turns[5]) + TurnTokens(turns[6])
	if i, ok := Cut(turns, 10, last3+10, all); !ok || i != 4 {
		t.Fatalf("cut at %d, want 4 (a user turn)", i)
	}
	// Room only for the call and its result: the cut falls before the call.
	last2 := TurnTokens(turns[5]) + TurnTokens(turns[6])
	if i, ok := Cut(turns, 0, last2, last2); !ok || i != 5 {
		t.Fatalf("cut at %d, want 5 (the call, with its result)", i)
	}
	// Less than the result alone: nothing fits.
	if _, ok := Cut(turns, 0, last2-1, last2-1); ok {
		t.Fatal("a cut between a call and its result")
	}
}

func TestSummaryFormat(t *testing.T) {
	c := Cursor{End: 1234, Hash: LineHash([]byte(`{"role":"user"}`))}
	b := FormatSummary(c, "the gist\nmore\n")
	got, text, ok := ParseSummary(b)
	if !ok || got != c || text != "the gist\nmore\n" {
		t.Fatalf("ParseSummary(%q) = %+v %q %v", b, got, text, ok)
	}
	for _, bad := range []string{"", "the gist", "<!-- ctxfs summary: cursor=0 line-sha256=0123456789abcdef -->\n",
		"<!-- ctxfs summary: cursor=012 line-sha256=0123456789abcdef -->\n", "<!-- ctxfs summary: cursor=12 line-sha256=01 -->\n",
		"<!-- ctxfs summary: cursor=-12 line-sha256=0123456789abcdef -->\n"} {
		if _, _, ok := ParseSummary([]byte(bad)); ok {
			t.Errorf("ParseSummary(%q) accepted", bad)
		}
	}
}

func TestNewest(t *testing.T) {
	s := "日本" + strings.Repeat("a", 9)
	for n, want := range map[int]string{0: "", 3: strings.Repeat("a", 9), 4: strings.Repeat("a", 9), 5: "本" + strings.Repeat("a", 9), 100: s} {
		if got := Newest(s, n); got != want || Tokens(got) > n {
			t.Errorf("Newest(%q, %d) = %q, want %q", s, n, got, want)
		}
	}
}
