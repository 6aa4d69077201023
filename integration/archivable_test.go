package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/proto"
)

// gcNames are the sessions a gc's output names, in its order: the
// "archive NAME" lines of a preview, or the "archived NAME" lines of
// --yes.
func gcNames(out, verb string) []string {
	var names []string
	for _, l := range strings.Split(out, "\n") {
		if n, ok := strings.CutPrefix(l, verb+" "); ok {
			names = append(names, n)
		}
	}
	return names
}

// TestGCPreviewAgreesWithYes: the preview (one archivable request for
// every candidate) names exactly the sessions a real --yes then
// archives, with every protection in play: a pattern that takes every
// session, so default, the current session, an active one and one with
// a planted state must each be kept by the server's rules, and a --keep.
func TestGCPreviewAgreesWithYes(t *testing.T) {
	s := newGCServer(t)
	args := []string{"agent", "session", "gc", "coder", "--pattern", "*", "--keep", "notes"}
	out, code := s.ctx(t, args...)
	previewed := gcNames(out, "archive")
	if code != 0 || !strings.HasPrefix(out, "ctx: dry-run; pass --yes to archive\n") {
		t.Fatalf("preview: exit %d\n%s", code, out)
	}
	if !sort.StringsAreSorted(previewed) {
		t.Errorf("preview not in name order: %v", previewed)
	}
	out, code = s.ctx(t, append(args, "--yes")...)
	archived := gcNames(out, "archived")
	if code != 0 || fmt.Sprint(archived) != fmt.Sprint(previewed) {
		t.Fatalf("--yes archived %v (exit %d), the preview said %v\n%s", archived, code, previewed, out)
	}
	want := "[e2e-x install-old keep-smoke my-smoke temp-a temp-b]"
	if fmt.Sprint(previewed) != want {
		t.Errorf("previewed %v, want %s", previewed, want)
	}
	out, code = s.ctx(t, args...)
	if code != 0 || len(gcNames(out, "archive")) != 0 {
		t.Errorf("a preview after --yes: exit %d\n%s", code, out)
	}
}

// TestArchivableRefusals: the socket op archivable refuses what it cannot
// answer with its exact errno (the names past the bound, a bad name, a
// list missing, a temp scope, a session of its own), writing nothing;
// and answers a uid only about its own sessions: another uid's sessions
// of the same names are not there for it (ENOENT), never archivable.
func TestArchivableRefusals(t *testing.T) {
	s := newGCServer(t)
	// uid 1001's home exists before the snapshot: its first request makes it.
	if frames, _, err := s.requestAs(owner, "coder", `{"op":"archivable","sessions":[]}`); err != nil || len(frames) != 1 || frames[0]["type"] != proto.FrameChecked {
		t.Fatalf("empty archivable: %v %v", frames, err)
	}
	before := hostSnapshot(t, s.store)
	tooMany := make([]string, proto.MaxArchivableSessions+1)
	for i := range tooMany {
		tooMany[i] = "x" // short: the line goes through argv (128 KiB)
	}
	many, _ := json.Marshal(tooMany)
	for _, c := range []struct{ line, code string }{
		{`{"op":"archivable","sessions":` + string(many) + `}`, "EMSGSIZE"},
		{`{"op":"archivable","sessions":["temp-a","../../0/agent/coder/session/temp-b"]}`, "EINVAL"},
		{`{"op":"archivable","sessions":["index"]}`, "EINVAL"},
		{`{"op":"archivable"}`, "EINVAL"},
		{`{"op":"archivable","sessions":"temp-a"}`, "EINVAL"},
		{`{"op":"archivable","sessions":["temp-a"],"session":"temp-a"}`, "EINVAL"},
		{`{"op":"archivable","sessions":["temp-a"],"scope":"temp"}`, "EINVAL"},
		{`{"op":"archivable","sessions":["temp-a"],"scope":"shared","space":"nowhere"}`, "ENOENT"},
	} {
		for _, who := range []*cred{nil, owner} {
			frames, raw, err := s.requestAs(who, "coder", c.line)
			if err != nil || len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != c.code {
				t.Errorf("%.80s as %s: %v, want one error %s\n%.300s", c.line, credName(who), err, c.code, raw)
			}
		}
	}
	// uid 1001 asks about root's sessions by their names: its own home
	// has none of them.
	frames, raw, err := s.requestAs(owner, "coder", `{"op":"archivable","sessions":["temp-a","temp-b","e2e-x"]}`)
	if err != nil || len(frames) != 4 || frames[3]["type"] != proto.FrameChecked {
		t.Fatalf("archivable as 1001: %v\n%s", err, raw)
	}
	for _, f := range frames[:3] {
		if f["type"] != proto.FrameKept || f["code"] != "ENOENT" {
			t.Errorf("uid 1001 told of root's session: %v", f)
		}
	}
	if diffs, _ := hostDiffs(before, hostSnapshot(t, s.store)); len(diffs) > 0 {
		t.Errorf("refused or foreign archivable requests wrote to the store: %v", diffs)
	}
	if _, err := os.Stat(filepath.Join(s.store, coderRel, "session", "temp-a")); err != nil {
		t.Errorf("temp-a: %v", err)
	}
}
