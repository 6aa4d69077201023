package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// writeSelfIDs writes meta.json (argv[1]) once for each self_id after
// argv[2], each a whole value in one write, and prints the errno name of
// each write that failed.
const writeSelfIDs = `
import errno, os, sys
for sid in sys.argv[2:]:
    try:
        with open(sys.argv[1], "w") as f:
            f.write('{"client":"ctx","scope":"private","self_id":"%s"}\n' % sid)
    except OSError as e:
        print(sid, errno.errorcode[e.errno])
`

// selfIDEntries are the entries of uid 1001's index of self_ids in the
// store (root's files, one per self_id).
func selfIDEntries(t *testing.T, s *server) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.store, "home/1001/.self_id"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestSelfIDIndexBounded: the index of self_ids a home keeps in the store
// (a file of root's per self_id) names only the self_ids its live
// sessions hold. A user who wrote meta.json with self_id after self_id
// (one session, 300 writes), or made sessions, gave each a self_id and
// deleted or archived it, left a file per self_id ever written, without
// end; now the index keeps the one held, another session is still
// refused it (EEXIST), and a self_id whose session is gone may be taken.
func TestSelfIDIndexBounded(t *testing.T) {
	s := limitedServer(t, "names=100", nil)
	for _, name := range []string{"a", "d", "z"} {
		s.sendAs(uid1001, name, "q-"+name, "", "hello")
	}
	home := s.mnt("home/1001/agent/coder/session")
	write := func(session string, ids ...string) string {
		t.Helper()
		out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", append([]string{"-c", writeSelfIDs, filepath.Join(home, session, "meta.json")}, ids...)...)
		testkit.Must(t, err)
		return strings.TrimSpace(out)
	}
	var ids []string
	for i := 0; i < 300; i++ {
		ids = append(ids, "id"+strings.Repeat("x", i%20)+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	if out := write("a", ids...); out != "" {
		t.Fatalf("300 self_ids written to one session: %s", out)
	}
	last := ids[len(ids)-1]
	if got := selfIDEntries(t, s); !slices.Equal(got, []string{last}) {
		t.Errorf("after 300 self_ids written to one session, the store's index holds %d entries (%v), want only %s", len(got), got[:min(len(got), 3)], last)
	}
	if out := write("z", last); out != last+" EEXIST" {
		t.Errorf("another session's claim of %s, held: %q, want EEXIST", last, out)
	}

	// A deleted or archived session's self_id leaves the index, and
	// another session may take it.
	if out := write("d", "deleted"); out != "" {
		t.Fatalf("self_id deleted: %s", out)
	}
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "gc", "coder", "--pattern", "d", "--delete", "--yes"); code != 0 {
		t.Fatalf("delete d: exit %d\n%s%s", code, out, errs)
	}
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "a"); code != 0 {
		t.Fatalf("archive a: exit %d\n%s%s", code, out, errs)
	}
	if got := selfIDEntries(t, s); len(got) != 0 {
		t.Errorf("after its sessions were deleted and archived, the store's index holds %d entries (%v), want none", len(got), got[:min(len(got), 3)])
	}
	if out := write("z", "deleted", last); out != "" {
		t.Errorf("the self_ids of sessions gone, taken by another: %s", out)
	}
	if got := selfIDEntries(t, s); !slices.Equal(got, []string{last}) {
		t.Errorf("the store's index holds %d entries (%v), want only %s", len(got), got[:min(len(got), 3)], last)
	}
}
