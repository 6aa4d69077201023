package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestSearchIndexNeverStale: what a server remembers of the index it
// checked (which segment files fit which log, the sessions' identities)
// never stands for a segment damaged in place or for a session made again
// at the same place, and strays in an index directory left by an earlier
// server go at the first search after a restart.
func TestSearchIndexNeverStale(t *testing.T) {
	s := newFuseServer(t)
	s.send("r", "a1", strings.Repeat("旧的会话里有很长的文本, ", 40))
	s.send("k", "a2", "另一个会话")
	sameLines(t, "first search", searchWho(t, s, "很长的文本"), "r user", "r assistant")
	sameLines(t, "again, remembered", searchWho(t, s, "很长的文本"), "r user", "r assistant")
	sameLines(t, "again, from memory", searchWho(t, s, "很长的文本"), "r user", "r assistant")

	// Every segment's filter zeroed in place, its header kept: a filter
	// trusted as remembered would now hide the match.
	idx := filepath.Join(s.store, "home/0/.search/agent/coder")
	segs, err := filepath.Glob(filepath.Join(idx, "*", "[0-9]*"))
	testkit.Must(t, err)
	if len(segs) < 2 {
		t.Fatalf("segments: %v", segs)
	}
	for _, p := range segs {
		b, err := os.ReadFile(p)
		testkit.Must(t, err)
		clear(b[64:])
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		testkit.Must(t, err)
		_, err = f.WriteAt(b, 0)
		testkit.Must(t, err)
		testkit.Must(t, f.Close())
	}
	sameLines(t, "segments damaged", searchWho(t, s, "很长的文本"), "r user", "r assistant")

	// Archived and made again at the same place, shorter, with no search
	// between (the old index stays, and what the server remembers of it):
	// the new session's text is found, the old one's is not.
	sameLines(t, "remembered again", searchWho(t, s, "很长的文本"), "r user", "r assistant")
	sameLines(t, "from memory again", searchWho(t, s, "很长的文本"), "r user", "r assistant")
	if frames := s.mustRequest("coder", `{"op":"archive","session":"r"}`); len(frames) == 0 || frames[len(frames)-1]["type"] == "error" {
		t.Fatalf("archive: %v", frames)
	}
	s.send("r", "a3", "新的")
	sameLines(t, "made again: new text", searchLines(t, s, "coder", "新的"), "r user 新的", "r assistant 新的")
	if out, errs, code := searchCtx(t, s, "coder", "很长的文本"); code != 1 || out != "" || errs != "" {
		t.Fatalf("made again: the archived text: exit %d out %q errs %q", code, out, errs)
	}

	// Strays in an index directory: a segment after a gap, a leftover of
	// an interrupted replace. A restarted server removes them at its first
	// search and finds the same.
	dir := filepath.Join(idx, "k")
	for _, name := range []string{"7", ".replace-leftover"} {
		testkit.Must(t, os.WriteFile(filepath.Join(dir, name), []byte("stray"), 0o600))
	}
	s.restart(syscall.SIGTERM)
	sameLines(t, "after a restart", searchLines(t, s, "coder", "另一个"), "k user 另一个会话", "k assistant 另一个会话")
	for _, name := range []string{"7", ".replace-leftover"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Fatalf("stray %s stayed: %v", name, err)
		}
	}
	if out, code := s.fsck(); code != 0 {
		t.Fatalf("fsck after searches: exit %d\n%s", code, out)
	}
}

// searchWho is the session and role of each match of root's coder
// search for q, sorted.
func searchWho(t *testing.T, s *server, q string) []string {
	t.Helper()
	var who []string
	for _, l := range searchLines(t, s, "coder", q) {
		f := strings.Fields(l)
		who = append(who, f[0]+" "+f[1])
	}
	return who
}
