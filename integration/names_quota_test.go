package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// writeEntry writes the value argv[2] to argv[1] (create, truncate, write,
// close) and prints "ok" or the errno name of the step that failed.
const writeEntry = `
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (sys.argv[2] + "\n").encode())
    finally:
        os.close(fd)
    print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])
`

// TestNamesQuota: the sessions and index entries a uid keeps (the index
// holds them in memory for good) are bounded per uid, CTXFS_LIMITS
// names=N: a mkdir of a session, a send making one or a write of a
// by-hash entry past the bound is EDQUOT and writes nothing; another uid
// is not affected; an entry removed or a session archived or deleted
// gives its name back; and after a restart the count is the store's, the
// bound as tight as before.
func TestNamesQuota(t *testing.T) {
	s := limitedServer(t, "names=5", nil)
	sess := s.mnt("home/1001/agent/coder/session")
	byHash := sess + "/index/by-hash/"
	s.sendAs(uid1001, "a", "q1", "", "hello")
	entry := func(c *cred, p, v string) string {
		t.Helper()
		out, err := runCmd(t, c, nil, "/usr/bin/python3", "-c", writeEntry, p, v)
		testkit.Must(t, err)
		return strings.TrimSpace(out)
	}
	if got := entry(uid1001, byHash+"h1", "a"); got != "ok" {
		t.Fatalf("the first by-hash entry: %s", got)
	}
	mkdir := func(name string) error {
		out, err := bashAs(t, uid1001, "mkdir "+sess+"/"+name)
		if err != nil && !strings.Contains(out, "Disk quota exceeded") {
			t.Fatalf("mkdir %s as uid 1001: %v %q, want EDQUOT or success", name, err, out)
		}
		return err
	}
	made := 0
	for ; made < 10 && mkdir(fmt.Sprint("m", made)) == nil; made++ {
	}
	if made == 0 || made == 10 {
		t.Fatalf("made %d sessions before EDQUOT with names=5", made)
	}
	refused := func(what string) {
		t.Helper()
		before := storeSnapshot(t, s)
		if mkdir("over") == nil {
			t.Fatalf("%s: mkdir past the bound made a session", what)
		}
		if got := entry(uid1001, byHash+"over", "a"); got != "EDQUOT" {
			t.Errorf("%s: by-hash entry past the bound: %s, want EDQUOT", what, got)
		}
		// A shell, which ignores close errors, sees the write refused.
		if out, err := bashAs(t, uid1001, "echo a > "+byHash+"over"); err == nil || !strings.Contains(out, "Disk quota exceeded") {
			t.Errorf("%s: echo to a by-hash entry past the bound: %v %q, want EDQUOT", what, err, out)
		}
		frames, raw, err := s.requestAs(uid1001, "coder", `{"op":"send","id":"over","session":"over","input":"hi"}`)
		if err != nil || len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "EDQUOT" {
			t.Errorf("%s: a send making a session past the bound: %v %s, want EDQUOT", what, err, raw)
		}
		testkit.Same(t, what+": the store after refusals", before, storeSnapshot(t, s))
		for _, p := range []string{sess + "/over", byHash + "over"} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s: %s after its refusal: %v, want ENOENT", what, p, err)
			}
		}
	}
	refused("at the bound")

	// Another uid has its own count.
	s.sendAs(uid1002, "b", "q2", "", "hello")
	if out, err := bashAs(t, uid1002, "mkdir "+s.mnt("home/1002/agent/coder/session/n0")); err != nil {
		t.Fatalf("mkdir as uid 1002: %v %q", err, out)
	}
	if got := entry(uid1002, s.mnt("home/1002/agent/coder/session/index/by-hash/h1"), "b"); got != "ok" {
		t.Errorf("a by-hash entry of uid 1002: %s", got)
	}

	// An entry removed gives its name back, once.
	if out, err := bashAs(t, uid1001, "rm "+byHash+"h1"); err != nil {
		t.Fatalf("rm by-hash/h1: %v %q", err, out)
	}
	if mkdir("r1") != nil {
		t.Fatal("mkdir after an entry's removal: refused")
	}
	refused("after a removal")

	// A session archived gives its name back.
	archive := func() {
		t.Helper()
		out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "m0")
		if code != 0 {
			t.Fatalf("archive m0: exit %d\n%s%s", code, out, errs)
		}
	}
	archive()
	if mkdir("r2") != nil {
		t.Fatal("mkdir after an archive: refused")
	}
	refused("after an archive")

	// A restart counts the store: as full as before, and an archive
	// again gives one back.
	s.restart(syscall.SIGTERM)
	refused("after a restart")
	if _, err := os.Stat(filepath.Join(s.store, "home/1001/archived_sessions/coder/m0")); err != nil {
		t.Fatalf("the archived m0: %v", err)
	}
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "m1"); code != 0 {
		t.Fatalf("archive m1 after the restart: exit %d\n%s%s", code, out, errs)
	}
	if mkdir("r3") != nil {
		t.Fatal("mkdir after an archive after the restart: refused")
	}
	refused("after an archive after the restart")

	// A session deleted gives its name back too.
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "gc", "coder", "--pattern", "r1", "--delete", "--yes"); code != 0 || !strings.Contains(out, "deleted r1") {
		t.Fatalf("delete r1: exit %d\n%s%s", code, out, errs)
	}
	if mkdir("r4") != nil {
		t.Fatal("mkdir after a delete: refused")
	}
	refused("after a delete")
}

// TestAgentsQuota: the agents and models a uid makes in its home (each a
// container whose index, once used, stays in memory) are bounded per uid,
// CTXFS_LIMITS agents=N, whether made by mkdir or by a first send to a
// defined agent: past the bound either is EDQUOT and writes nothing; a
// name that exists is still EEXIST; another uid is not affected; after a
// restart the count is the store's. No agent is removed through the
// mount, so none is given back.
func TestAgentsQuota(t *testing.T) {
	s := limitedServer(t, "agents=3", func(s *server) {
		s.define("other", map[string]string{"model": "debug/echo"})
	})
	s.sendAs(uid1001, "a", "q1", "", "hello") // agent/coder: the first
	home := s.mnt("home/1001")
	for _, d := range []string{"agent/x0", "agent/x1", "model", "model/debug"} {
		if out, err := bashAs(t, uid1001, "mkdir "+home+"/"+d); err != nil {
			t.Fatalf("mkdir %s as uid 1001: %v %q", d, err, out)
		}
	}
	if out, err := bashAs(t, uid1001, "mkdir "+home+"/agent/x0"); err == nil || !strings.Contains(out, "File exists") {
		t.Errorf("mkdir of an agent that exists at the bound: %v %q, want EEXIST", err, out)
	}
	refused := func(what string) {
		t.Helper()
		before := storeSnapshot(t, s)
		for _, d := range []string{"agent/x2", "model/debug/m.d"} {
			if out, err := bashAs(t, uid1001, "mkdir "+home+"/"+d); err == nil || !strings.Contains(out, "Disk quota exceeded") {
				t.Errorf("%s: mkdir %s past the bound: %v %q, want EDQUOT", what, d, err, out)
			}
		}
		frames, raw, err := s.requestAs(uid1001, "other", `{"op":"send","id":"o1","session":"o","input":"hi"}`)
		if err != nil || len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "EDQUOT" {
			t.Errorf("%s: a first send to another agent past the bound: %v %s, want EDQUOT", what, err, raw)
		}
		testkit.Same(t, what+": the store after refusals", before, storeSnapshot(t, s))
	}
	refused("at the bound")

	s.sendAs(uid1002, "b", "q2", "", "hello")
	if out, err := bashAs(t, uid1002, "mkdir "+s.mnt("home/1002/agent/y0")); err != nil {
		t.Errorf("mkdir of an agent as uid 1002: %v %q", err, out)
	}

	s.restart(syscall.SIGTERM)
	refused("after a restart")
}

// TestSpaceNamesQuota: a shared space's sessions and index entries are
// bounded per space, as a home's are per uid (CTXFS_LIMITS names=N; the
// space's history is the server's in the store, so the space, not a
// member, is what a count after a restart can find): past the bound a
// mkdir of a session, a write of a by-hash entry or a send making a
// session is EDQUOT for every member and writes nothing; a member's own
// home keeps its own count; an entry removed or a session deleted gives
// its name back; after a restart the count is the store's.
func TestSpaceNamesQuota(t *testing.T) {
	s := limitedServer(t, "names=5", nil)
	s.spaceAdd("team", 1234)
	a, b := member(1001, 1234), member(1002, 1234)
	extra := `,"scope":"shared","space":"team"`
	sess := s.mnt("shared/team/agent/coder/session")
	byHash := sess + "/index/by-hash/"
	s.sendAs(a, "t1", "q1", extra, "hello")
	entry := func(c *cred, p, v string) string {
		t.Helper()
		out, err := runCmd(t, c, nil, "/usr/bin/python3", "-c", writeEntry, p, v)
		testkit.Must(t, err)
		return strings.TrimSpace(out)
	}
	if got := entry(b, byHash+"h1", "t1"); got != "ok" {
		t.Fatalf("the first by-hash entry: %s", got)
	}
	mkdir := func(c *cred, name string) error {
		t.Helper()
		out, err := bashAs(t, c, "mkdir "+sess+"/"+name)
		if err != nil && !strings.Contains(out, "Disk quota exceeded") {
			t.Fatalf("mkdir %s as %s: %v %q, want EDQUOT or success", name, credName(c), err, out)
		}
		return err
	}
	made := 0
	for ; made < 10 && mkdir(b, fmt.Sprint("m", made)) == nil; made++ {
	}
	if made == 0 || made == 10 {
		t.Fatalf("made %d sessions in the space before EDQUOT with names=5", made)
	}
	refused := func(what string) {
		t.Helper()
		before := storeSnapshot(t, s)
		for _, c := range []*cred{a, b} {
			if mkdir(c, "over") == nil {
				t.Fatalf("%s: mkdir as %s past the bound made a session", what, credName(c))
			}
			if got := entry(c, byHash+"over", "t1"); got != "EDQUOT" {
				t.Errorf("%s: by-hash entry as %s past the bound: %s, want EDQUOT", what, credName(c), got)
			}
			frames, raw, err := s.requestAs(c, "coder", `{"op":"send","id":"over","session":"over"`+extra+`,"input":"hi"}`)
			if err != nil || len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "EDQUOT" {
				t.Errorf("%s: a send as %s making a session past the bound: %v %s, want EDQUOT", what, credName(c), err, raw)
			}
		}
		testkit.Same(t, what+": the store after refusals", before, storeSnapshot(t, s))
		for _, p := range []string{sess + "/over", byHash + "over"} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s: %s after its refusal: %v, want ENOENT", what, p, err)
			}
		}
	}
	refused("at the bound")

	// A member's home has its own count.
	s.sendAs(a, "p1", "q2", "", "hello")
	if out, err := bashAs(t, a, "mkdir "+s.mnt("home/1001/agent/coder/session/n0")); err != nil {
		t.Fatalf("mkdir in uid 1001's home: %v %q", err, out)
	}

	// An entry removed gives its name back.
	if out, err := bashAs(t, a, "rm "+byHash+"h1"); err != nil {
		t.Fatalf("rm by-hash/h1: %v %q", err, out)
	}
	if mkdir(a, "r1") != nil {
		t.Fatal("mkdir after an entry's removal: refused")
	}
	refused("after a removal")

	// A session deleted gives its name back (a space's sessions are
	// deleted, not archived: archived sessions live in a home).
	del := func(c *cred, name string) {
		t.Helper()
		if out, errs, code := ctxSplitAs(t, s, c, "agent", "session", "gc", "coder", "--shared", "team", "--pattern", name, "--delete", "--yes"); code != 0 || !strings.Contains(out, "deleted "+name) {
			t.Fatalf("delete %s as %s: exit %d\n%s%s", name, credName(c), code, out, errs)
		}
	}
	del(b, "m0")
	if mkdir(b, "r2") != nil {
		t.Fatal("mkdir after a delete: refused")
	}
	refused("after a delete")

	// A restart counts the store: as full as before, and a delete again
	// gives one back.
	s.restart(syscall.SIGTERM)
	refused("after a restart")
	del(a, "m1")
	if mkdir(a, "r3") != nil {
		t.Fatal("mkdir after a delete after the restart: refused")
	}
	refused("after a delete after the restart")
}

// TestSpaceAgentsQuota: the agents and models made in a shared space are
// bounded per space (CTXFS_LIMITS agents=N), whether made by a member's
// mkdir or a first send: past the bound either is EDQUOT for every member
// and writes nothing; a name that exists is still EEXIST; a member's home
// keeps its own count; after a restart the count is the store's. A member
// cannot make a space: only root makes them.
func TestSpaceAgentsQuota(t *testing.T) {
	s := limitedServer(t, "agents=3", func(s *server) {
		s.define("other", map[string]string{"model": "debug/echo"})
	})
	s.spaceAdd("team", 1234)
	a, b := member(1001, 1234), member(1002, 1234)
	extra := `,"scope":"shared","space":"team"`
	s.sendAs(a, "t1", "q1", extra, "hello") // shared/team/agent/coder: the first
	space := s.mnt("shared/team")
	for _, d := range []string{"agent/x0", "agent/x1", "model", "model/debug"} {
		if out, err := bashAs(t, b, "mkdir "+space+"/"+d); err != nil {
			t.Fatalf("mkdir %s as uid 1002: %v %q", d, err, out)
		}
	}
	if out, err := bashAs(t, a, "mkdir "+space+"/agent/x0"); err == nil || !strings.Contains(out, "File exists") {
		t.Errorf("mkdir of an agent that exists at the bound: %v %q, want EEXIST", err, out)
	}
	refused := func(what string) {
		t.Helper()
		before := storeSnapshot(t, s)
		for _, c := range []*cred{a, b} {
			for _, d := range []string{"agent/x2", "model/debug/m.d"} {
				if out, err := bashAs(t, c, "mkdir "+space+"/"+d); err == nil || !strings.Contains(out, "Disk quota exceeded") {
					t.Errorf("%s: mkdir %s as %s past the bound: %v %q, want EDQUOT", what, d, credName(c), err, out)
				}
			}
			frames, raw, err := s.requestAs(c, "other", `{"op":"send","id":"o1","session":"o"`+extra+`,"input":"hi"}`)
			if err != nil || len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "EDQUOT" {
				t.Errorf("%s: a first send as %s to another agent past the bound: %v %s, want EDQUOT", what, credName(c), err, raw)
			}
		}
		testkit.Same(t, what+": the store after refusals", before, storeSnapshot(t, s))
	}
	refused("at the bound")

	if out, err := bashAs(t, b, "mkdir -p "+s.mnt("home/1002/agent/y0")); err != nil {
		t.Errorf("mkdir of an agent in uid 1002's home: %v %q", err, out)
	}

	// Spaces, which a member could otherwise multiply, are root's to
	// make: a member's mkdir of one is EACCES (shared/ is root's), a
	// send naming one that is not there ENOENT, and neither writes
	// anything.
	before := storeSnapshot(t, s)
	if out, err := bashAs(t, a, "mkdir "+s.mnt("shared/mine")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("a member's mkdir of a space: %v %q, want EACCES", err, out)
	}
	frames, raw, err := s.requestAs(a, "coder", `{"op":"send","id":"m1","session":"m","scope":"shared","space":"mine","input":"hi"}`)
	if err != nil || len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "ENOENT" {
		t.Errorf("a send to a space that is not there: %v %s, want ENOENT", err, raw)
	}
	testkit.Same(t, "the store after a member's space refused", before, storeSnapshot(t, s))

	s.restart(syscall.SIGTERM)
	refused("after a restart")
}

// TestAgentsQuotaImport: an import into an agent the home does not have
// yet makes one (its root/ first), and is counted as one (CTXFS_LIMITS
// agents=N): past that bound it is EDQUOT and writes nothing, and so is
// one into a new agent when the home's names are at their bound (nothing
// of the agent is left, nor charged); after a restart the count is the
// store's.
func TestAgentsQuotaImport(t *testing.T) {
	s := limitedServer(t, "agents=3,names=4", func(s *server) {
		s.define("x0", map[string]string{"model": "debug/echo"})
		s.define("x1", map[string]string{"model": "debug/echo"})
		s.define("y0", map[string]string{"model": "debug/echo"})
	})
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	home := userHome(t, importAnn, claude)
	agents := s.mnt("home/1001/agent") + "/"
	mkdir := func(name string) (string, error) {
		return bashAs(t, importAnn, "mkdir -p "+agents+name)
	}
	for _, d := range []string{"x0", "x1"} {
		if out, err := mkdir(d); err != nil {
			t.Fatalf("mkdir %s as uid 1001: %v %q", d, err, out)
		}
		// A session and its by-uuid entry: two names each.
		if out, code := s.ctxImport(importAnn, home, d, "--from", "claude-code"); code != 0 {
			t.Fatalf("an import into %s: exit %d\n%s", d, code, out)
		}
	}
	refused := func(what, agent string) {
		t.Helper()
		before := storeSnapshot(t, s)
		if out, code := s.ctxImport(importAnn, home, agent, "--from", "claude-code"); code == 0 || !strings.Contains(out, "EDQUOT") {
			t.Errorf("%s: an import into the new agent %s: exit %d\n%s, want EDQUOT", what, agent, code, out)
		}
		testkit.Same(t, what+": the store after the import refused", before, storeSnapshot(t, s))
	}
	refused("the names at their bound", "coder")
	if out, err := mkdir("x2"); err != nil {
		t.Fatalf("mkdir of a third agent after the refused import: %v %q", err, out)
	}
	// Room for an import's two names again, none for an agent.
	for _, d := range []string{"x0", "x1"} {
		if out, err := bashAs(t, importAnn, "rm "+agents+d+"/session/index/by-uuid/"+claude.session.ID); err != nil {
			t.Fatalf("rm of %s's by-uuid entry: %v %q", d, err, out)
		}
	}
	refused("the agents at their bound", "y0")
	s.restart(syscall.SIGTERM)
	refused("after a restart", "y0")
	if out, err := mkdir("x3"); err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Errorf("mkdir of a fourth agent after the restart: %v %q, want EDQUOT", err, out)
	}
}

// TestAgentsQuotaFirstSendsRace: first sends racing to one agent the
// home does not have yet each saw it missing and each charged it, so
// that one agent counted as several until a restart (and a mkdir of an
// agent within the bound was EDQUOT). One charges now. Each user races
// 12 sends at once to each of two agents, then makes a third.
func TestAgentsQuotaFirstSendsRace(t *testing.T) {
	s := limitedServer(t, "agents=3", func(s *server) {
		s.define("other", map[string]string{"model": "debug/echo"})
	})
	for _, u := range []*cred{uid1001, {uid: 1002, gid: 1002}} {
		for _, agent := range []string{"coder", "other"} {
			var wg sync.WaitGroup
			for i := 0; i < 12; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.requestAs(u, agent, fmt.Sprintf(`{"op":"send","id":"r%d","session":"s%d","input":"hi"}`, i, i))
				}()
			}
			wg.Wait()
		}
		d := s.mnt(fmt.Sprintf("home/%d/agent/x0", u.uid))
		if out, err := bashAs(t, u, "mkdir "+d); err != nil {
			t.Errorf("uid %d: mkdir of a third agent after first sends racing to two (agents=3): %v %q", u.uid, err, out)
		}
	}
}

// TestProvidersAreDefinedOnes: a model provider's directory of a home
// (model/PROVIDER) holds no session, so it was charged to no bound, and
// a user could mkdir one of every name: inodes in root's store and
// listings the server holds, without end, past the agents bound. Only a
// provider the root defines (ROOT/model/PROVIDER/, or debug) is made
// now; any other is ENOENT and makes nothing, in a home and a space.
func TestProvidersAreDefinedOnes(t *testing.T) {
	s := limitedServer(t, "agents=1", func(s *server) {
		s.defineModel("m", "http://127.0.0.1:9")
	})
	s.spaceAdd("team", 1234)
	for _, c := range []struct {
		who  *cred
		home string
	}{{uid1001, s.mnt("home/1001/model")}, {member(1002, 1234), s.mnt("shared/team/model")}} {
		if out, err := bashAs(t, c.who, "mkdir -p "+c.home); err != nil {
			t.Fatalf("mkdir %s: %v %q", c.home, err, out)
		}
		before := storeSnapshot(t, s)
		out, err := bashAs(t, c.who, "for i in $(seq 1 50); do mkdir "+c.home+"/p$i 2>&1 || true; done; ls -A "+c.home)
		if err != nil || strings.Count(out, "No such file or directory") != 50 || strings.Contains(out, "\np") {
			t.Errorf("mkdir of 50 providers the root does not define in %s: %v\n%.600s\nwant ENOENT each, none made", c.home, err, out)
		}
		testkit.Same(t, "the store after mkdirs of undefined providers", before, storeSnapshot(t, s))
		if out, err := bashAs(t, c.who, "mkdir "+c.home+"/fake "+c.home+"/debug"); err != nil {
			t.Errorf("mkdir of a defined provider and debug in %s: %v %q", c.home, err, out)
		}
	}
}

// TestFirstSendsPastNamesMakeNoAgents: first sends racing to agents the
// home lacks, with room for one session left (CTXFS_LIMITS names=N),
// each found room, made its agent (root/, session/), and only then was
// refused EDQUOT for its session: the sends failed, yet left agents in
// the user's tree, each one of their agents. The session's name is held
// before anything is made now: one send makes its agent and session, the
// others are EDQUOT and make nothing.
func TestFirstSendsPastNamesMakeNoAgents(t *testing.T) {
	const n = 12
	s := limitedServer(t, "names=1", func(s *server) {
		for i := 0; i < n; i++ {
			s.define(fmt.Sprintf("a%d", i), map[string]string{"model": "debug/echo"})
		}
	})
	codes := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			frames, _, _ := s.requestAs(uid1001, fmt.Sprintf("a%d", i), `{"op":"send","id":"r","session":"s","input":"hi"}`)
			if len(frames) > 0 {
				codes[i] = fmt.Sprint(frames[0]["type"], frames[0]["code"])
			}
		}()
	}
	wg.Wait()
	started := 0
	for _, c := range codes {
		switch c {
		case "start<nil>":
			started++
		case "errorEDQUOT":
		default:
			t.Errorf("a first send with one name left: %q, want start or EDQUOT", c)
		}
	}
	ents, err := os.ReadDir(filepath.Join(s.store, "home/1001/agent"))
	testkit.Must(t, err)
	if started != 1 || len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%d first sends at once with one name left: %d started, the store holds agents %v; want one of each", n, started, names)
	}
}
