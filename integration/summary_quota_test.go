package integration

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestSummaryKeptWhenRefused: a new context/summary.md that its owner's
// quota refuses (EDQUOT) leaves the summary before it as it was. uid
// 1001 has a short summary; it fills its quota; the next summary, longer
// by blocks, is refused, and summary.md must still hold the first one.
// It was truncated first and then refused: empty.
func TestSummaryKeptWhenRefused(t *testing.T) {
	requireFUSE(t)
	var long atomic.Bool
	p := newFakeProvider(t, func(w http.ResponseWriter, r *http.Request) {})
	p.mu.Lock()
	p.reply = func(w http.ResponseWriter, r *http.Request) {
		body, _ := p.last()
		switch {
		case !strings.Contains(messagesText(body), "You condense conversations"):
			openAIReply("ok")(w, r)
		case long.Load():
			openAIReply("SECOND "+strings.Repeat("y", 12<<10))(w, r)
		default:
			openAIReply("FIRST: the user asked numbered questions")(w, r)
		}
	}
	p.mu.Unlock()
	s := newServerWith(t, func(s *server) {
		s.env = append(s.env, "CTXFS_LIMITS=freebytes=262144")
		defineFakeModel(t, s, "openai-chat", p.URL+"/v1", nil)
		s.define("small", map[string]string{"model": "fake/llm", "window": "100000\n", "compact.strategy": "summarize\n"})
	})
	openToAll(t, s.root)
	compact := func() {
		t.Helper()
		frames, raw, err := s.requestAs(owner, "small", `{"op":"compact","session":"w"}`)
		if err != nil || len(frames) == 0 {
			t.Fatalf("compact: %v %s", err, raw)
		}
	}
	for i := 1; i <= 3; i++ {
		s.askSmallAs(owner, "w", fmt.Sprint("q", i), question(i))
	}
	compact()
	dir := s.sessionDir(1001, "small", "w")
	first, _ := checkSummaryCursor(t, dir)
	if !strings.HasPrefix(first, "FIRST") {
		t.Fatalf("the first summary: %q", first)
	}
	before := fileBytes(t, filepath.Join(dir, "context", "summary.md"))

	for i := 4; i <= 5; i++ {
		s.askSmallAs(owner, "w", fmt.Sprint("q", i), question(i))
	}
	context := s.mnt("home/1001/agent/small/session/w/context")
	if _, why := pyAs(t, owner, fillFile, filepath.Join(context, "fill"), "4096", "1048576"); why != "EDQUOT" {
		t.Fatalf("filling the quota: %s", why)
	}
	long.Store(true)
	compact()
	if got := fileBytes(t, filepath.Join(dir, "context", "summary.md")); got != before {
		t.Fatalf("summary.md after a summary its quota refused: %d bytes %.60q, want the first summary (%d bytes) as it was\nlog:\n%s", len(got), got, len(before), s.logText())
	}
}
