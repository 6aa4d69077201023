package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// appendErrno appends argv[2] to argv[1] in one write of an O_APPEND
// descriptor, closes it, and prints "ok" or the errno name of the step
// that failed.
const appendErrno = `
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, sys.argv[2].encode())
    finally:
        os.close(fd)
    print("ok")
except OSError as e:
    print(errno.errorcode[e.errno])
`

// stampedLine is a user line of messages.jsonl that the store holds as n
// bytes once the server stamps it with the writer's uid 1001 (abi/stamp.go).
func stampedLine(n int) string {
	const frame = len(`{"role":"user","content":""}`) + len(`,"uid":1001`) + 1
	return `{"role":"user","content":"` + strings.Repeat("x", n-frame) + `"}` + "\n"
}

// storeHistory is what uid's home holds of history in the store, as the
// README says the bound counts it (homeHistory).
func storeHistory(t *testing.T, s *server, uid int) int64 {
	t.Helper()
	return homeHistory(t, s, fmt.Sprint("home/", uid))
}

// homeHistory is what a home or a space ("shared/team") holds of history
// in the store, as the README says the bound counts it: every session's
// (live and archived) messages.jsonl, events.jsonl, meta.json and
// snapshots (AGENTS.md, SKILLS.md), and its versions' index and contents.
func homeHistory(t *testing.T, s *server, home string) int64 {
	t.Helper()
	dir := filepath.Join(s.store, home)
	var n int64
	for _, pat := range []string{"agent/*/session/*", "archived_sessions/*/*"} {
		dirs, err := filepath.Glob(filepath.Join(dir, pat))
		testkit.Must(t, err)
		for _, d := range dirs {
			n += sessionHistory(t, d)
		}
	}
	return n
}

// sessionHistory is what the session directory d (in the store) holds of
// its home's history.
func sessionHistory(t *testing.T, d string) int64 {
	t.Helper()
	var n int64
	files, _ := filepath.Glob(filepath.Join(d, "versions", "sha256", "*"))
	for _, f := range append(files, filepath.Join(d, "messages.jsonl"), filepath.Join(d, "events.jsonl"), filepath.Join(d, "meta.json"), filepath.Join(d, "AGENTS.md"), filepath.Join(d, "SKILLS.md"), filepath.Join(d, "versions", "index.jsonl")) {
		if st, err := os.Lstat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}

// appendErrnoAs appends data to the log at path as c, in one O_APPEND write
// (appendErrno), and says "ok" or the errno's name.
func appendErrnoAs(t *testing.T, c *cred, path, data string) string {
	t.Helper()
	out, err := runCmd(t, c, nil, "/usr/bin/python3", "-c", appendErrno, path, data)
	testkit.Must(t, err)
	return strings.TrimSpace(out)
}

// fillHistory appends lines with appendLine (stamped as uid 1001's or
// 1002's) until held, the store's bytes of history of one home or space,
// reaches bound, the last line exactly what is left: that the server lets
// it in, and refuses one byte more, shows its count is the store's to the
// byte. A refused append through the mount records its loss in
// events.jsonl when that fits (RecordLoss): the line one byte too long is
// tried only when too little is left for that record.
func fillHistory(t *testing.T, what string, bound int64, held func() int64, appendLine func(string) string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		room := bound - held()
		switch {
		case room == 0:
			return
		case room > 2200:
			room = 2000
		case room > 200:
			room -= 150
		default:
			if got := appendLine(stampedLine(int(room + 1))); got != "EDQUOT" {
				t.Fatalf("%s: a line of %d bytes with %d left: %s, want EDQUOT", what, room+1, room, got)
			}
			if left := bound - held(); left != room {
				t.Fatalf("%s: a refused line with %d bytes left wrote %d bytes", what, room, room-left)
			}
		}
		if got := appendLine(stampedLine(int(room))); got != "ok" {
			t.Fatalf("%s: a line of %d bytes: %s", what, room, got)
		}
	}
	t.Fatalf("%s: never reached the bound", what)
}

// waitListsWritten waits until the index/list of each container (store
// paths) is in the store as the mount serves it: it is written behind,
// and a snapshot of the store's own index files taken before would see it
// change (storeSnapshot compares the index as served, and needs no wait).
func waitListsWritten(t *testing.T, s *server, containers ...string) {
	t.Helper()
	eventually(t, 10*time.Second, "index/list written", func() bool {
		for _, c := range containers {
			list := c + "/index/list"
			b, _ := os.ReadFile(filepath.Join(s.store, list))
			if served, _ := os.ReadFile(s.mnt(list)); string(b) != string(served) {
				return false
			}
		}
		return true
	})
}

// TestStoreBytesQuota: the bytes of history a uid's home holds in the
// store (its sessions' logs, live and archived, and their versions) are
// bounded per uid, CTXFS_LIMITS logbytes=N, counted exactly: lines
// appended through an O_APPEND descriptor fill it to the byte, and past
// it an append (a whole batch, not its first line), a send to a session
// or one making a session, and an import are EDQUOT and write nothing;
// another uid is not affected; a delete gives the session's bytes back,
// exactly; and after a restart the count is the store's, as tight.
func TestStoreBytesQuota(t *testing.T) {
	const bound = 16384
	s := limitedServer(t, fmt.Sprintf("logbytes=%d", bound), nil)
	s.sendAs(uid1001, "a", "q1", "", "hello")
	s.sendAs(uid1001, "d", "q2", "", "to be deleted")
	s.sendAs(uid1001, "e", "q3", "", "to be deleted after a restart")
	s.sendAs(uid1001, "f", "q5", "", "the current session, which gc keeps")
	log := s.mnt("home/1001/agent/coder/session/a/messages.jsonl")
	appendLine := func(data string) string {
		t.Helper()
		return appendErrnoAs(t, uid1001, log, data)
	}
	fill := func(what string) {
		t.Helper()
		fillHistory(t, what, bound, func() int64 { return storeHistory(t, s, 1001) }, appendLine)
	}
	// An import below the bound is charged what it writes (fill checks
	// it to the byte); one past it is refused.
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	codex := readImportFile(t, cli.Codex, "tool.jsonl")
	importHome := userHome(t, importAnn, claude, codex)
	if out, code := s.ctxImport(importAnn, importHome, "coder", "--from", "claude-code"); code != 0 {
		t.Fatalf("an import below the bound: exit %d\n%s", code, out)
	}
	s.waitListed(t, 1001, claude.session.ID)
	fill("the first fill")
	refused := func(what string) {
		t.Helper()
		before := storeSnapshot(t, s)
		if got := appendLine(stampedLine(41)); got != "EDQUOT" {
			t.Errorf("%s: an append of one short line: %s, want EDQUOT", what, got)
		}
		if got := appendLine(`{"role":"user","content":"a"}` + "\n" + stampedLine(2000)); got != "EDQUOT" {
			t.Errorf("%s: an append of two lines: %s, want EDQUOT", what, got)
		}
		for _, session := range []string{"a", "new"} {
			frames, raw, err := s.requestAs(uid1001, "coder", `{"op":"send","id":"over-`+session+`","session":"`+session+`","input":"hi"}`)
			if err != nil || len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "EDQUOT" {
				t.Errorf("%s: a send to session %s: %v %s, want EDQUOT", what, session, err, raw)
			}
		}
		if out, code := s.ctxImport(importAnn, importHome, "coder", "--from", "codex", filepath.Join(importHome, ".codex", "sessions")); code == 0 || !strings.Contains(out, "EDQUOT") {
			t.Errorf("%s: an import: exit %d\n%s", what, code, out)
		}
		testkit.Same(t, what+": the store after refusals", before, storeSnapshot(t, s))
		if _, err := os.Stat(filepath.Join(s.store, "home/1001/agent/coder/session/new")); !os.IsNotExist(err) {
			t.Errorf("%s: the refused send's session: %v, want ENOENT", what, err)
		}
		if got := storeHistory(t, s, 1001); got != bound {
			t.Errorf("%s: the home holds %d bytes of history, want %d", what, got, bound)
		}
	}
	refused("at the bound")

	// Another uid has its own count.
	s.sendAs(uid1002, "b", "q4", "", "hello")

	// A delete gives the session's bytes back, exactly (fill checks it to
	// the byte).
	del := func(name string) {
		t.Helper()
		before := storeHistory(t, s, 1001)
		if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "gc", "coder", "--pattern", name, "--delete", "--yes"); code != 0 || !strings.Contains(out, "deleted "+name) {
			t.Fatalf("delete %s: exit %d\nout: %s\nerr: %s", name, code, out, errs)
		}
		if freed := before - storeHistory(t, s, 1001); freed < 200 {
			t.Fatalf("deleting %s freed %d bytes of history", name, freed)
		}
		list := filepath.Join(s.store, "home/1001/agent/coder/session/index/list")
		eventually(t, 10*time.Second, "index/list without "+name, func() bool { // written behind
			b, _ := os.ReadFile(list)
			return !slices.Contains(strings.Split(string(b), "\n"), name)
		})
	}
	del("d")
	fill("after a delete")
	refused("after a delete")

	// A restart counts the store: as full as before, and exactly so.
	s.restart(syscall.SIGTERM)
	refused("after a restart")
	del("e")
	fill("after a restart and a delete")
	refused("after a restart and a delete")

	// An archived session's history still counts, after a restart too.
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "a"); code != 0 {
		t.Fatalf("archive a: exit %d\n%s%s", code, out, errs)
	}
	s.restart(syscall.SIGTERM)
	if frames, raw, err := s.requestAs(uid1001, "coder", `{"op":"send","id":"after-archive","session":"a","input":"hi"}`); err != nil || len(frames) != 1 || frames[0]["code"] != "EDQUOT" {
		t.Errorf("a send after the archive (archived sessions count): %v %s, want EDQUOT", err, raw)
	}
}

// TestStoreBytesQuotaVersions: a file version counts in the bytes of
// history of the session's home (CTXFS_LIMITS logbytes=N): a tool's
// change whose earlier content would pass the bound is refused EDQUOT,
// the file and versions/ as they were, while a change whose version fits
// (a new file's absence) is kept; the run goes on and ends.
func TestStoreBytesQuotaVersions(t *testing.T) {
	const bound = 32768
	p := newFakeProvider(t, scripted(
		openAICall("w1", "fs_write", `{"path":"big.txt","content":"small\n"}`),
		openAICall("w2", "fs_write", `{"path":"new.txt","content":"new\n"}`),
		openAIReply("written")))
	s := limitedServer(t, fmt.Sprintf("logbytes=%d", bound), func(s *server) {
		defineFakeModel(t, s, "openai-chat", p.URL+"/v1", nil)
		s.define("doer", map[string]string{"model": "fake/llm", "tools": "fs.read\nfs.write\n", "perm": "rw\n"})
	})
	eventually(t, 10*time.Second, "the doer socket", func() bool {
		_, err := os.Stat(filepath.Join(s.root, "agent", "doer.sock"))
		return err == nil
	})
	big := strings.Repeat("0123456789abcde\n", 40000/16)
	if out, err := runCmd(t, owner, nil, "sh", "-c", "mkdir -p "+s.mnt("home/1001/agent/doer")+" && printf %s \"$1\" > "+s.mnt("home/1001/agent/doer/root/big.txt"), "sh", big); err != nil {
		t.Fatalf("writing big.txt as uid 1001: %v %s", err, out)
	}
	frames := waitRunDone(t, s.sendAsync(owner, "v", "change files"))
	if d := lastDone(frames); d == nil || d["status"] != "ok" {
		t.Fatalf("run: %v", frames)
	}
	root := filepath.Join(s.store, "home", "1001", "agent", "doer", "root")
	if b, _ := os.ReadFile(filepath.Join(root, "big.txt")); len(b) != 40000 {
		t.Errorf("big.txt after a change whose version passes the bound: %d bytes, want 40000", len(b))
	}
	if b, _ := os.ReadFile(filepath.Join(root, "new.txt")); string(b) != "new\n" {
		t.Errorf("new.txt: %q, want its write (its version fits)", b)
	}
	dir := s.sessionDir(1001, "doer", "v")
	if contents, _ := filepath.Glob(filepath.Join(dir, "versions", "sha256", "*")); len(contents) != 0 {
		t.Errorf("contents kept past the bound: %v", contents)
	}
	if idx := fileBytes(t, filepath.Join(dir, "versions", "index.jsonl")); strings.Count(idx, "\n") != 1 || !strings.Contains(idx, `/new.txt","action":"create"`) {
		t.Errorf("versions/index.jsonl:\n%s\nwant one line, new.txt's", idx)
	}
	if msgs := fileBytes(t, filepath.Join(dir, "messages.jsonl")); !strings.Contains(msgs, "EDQUOT") {
		t.Errorf("the refused change's tool result names no EDQUOT:\n%.3000s", msgs)
	}
	if got := storeHistory(t, s, 1001); got > bound {
		t.Errorf("the home holds %d bytes of history, over the bound %d", got, bound)
	}
}

// TestStoreBytesQuotaRunStopped: a run whose frames would take its home
// past the bound (CTXFS_LIMITS logbytes=N) is stopped as a run whose
// frames cannot be recorded: its end (an EDQUOT error, done error, state
// error) is recorded all the same, a few hundred bytes past the bound,
// so that the session is not left running; the next send is EDQUOT. So
// is one in a shared space, whose bound is the space's.
func TestStoreBytesQuotaRunStopped(t *testing.T) {
	for _, place := range []struct{ home, extra string }{
		{"home/1001", ""},
		{"shared/team", `,"scope":"shared","space":"team"`},
	} {
		t.Run(place.home, func(t *testing.T) {
			const bound = 8192
			p := newFakeProvider(t, scripted(openAIReply(strings.Repeat("long answer ", 1000))))
			s := limitedServer(t, fmt.Sprintf("logbytes=%d", bound), func(s *server) {
				defineFakeModel(t, s, "openai-chat", p.URL+"/v1", nil)
			})
			s.spaceAdd("team", 1234)
			frames, raw, err := s.requestAs(member(1001, 1234), "assistant", `{"op":"send","id":"r1","session":"r"`+place.extra+`,"input":"answer at length"}`)
			if err != nil {
				t.Fatalf("send: %v %s", err, raw)
			}
			var errEv frame
			for _, f := range frames {
				if f["type"] == "error" {
					errEv = f
				}
			}
			if d := lastDone(frames); d == nil || d["status"] != "error" || errEv == nil || errEv["code"] != "EDQUOT" {
				t.Fatalf("a run past the bound: %s, want an EDQUOT error and done error", raw)
			}
			rel := place.home + "/agent/assistant/session/r"
			dir := filepath.Join(s.store, rel)
			events := fileBytes(t, filepath.Join(dir, "events.jsonl"))
			if !strings.Contains(events, `"code":"EDQUOT"`) || !strings.Contains(events, `"status":"error"`) {
				t.Errorf("events.jsonl does not record the run's end:\n%s", events)
			}
			if strings.Contains(fileBytes(t, filepath.Join(dir, "messages.jsonl")), "long answer") {
				t.Errorf("the answer that did not fit was recorded")
			}
			if got := homeHistory(t, s, place.home); got > bound+1024 {
				t.Errorf("%s holds %d bytes of history, more than the run's end past the bound %d", place.home, got, bound)
			}
			if st, _ := os.ReadFile(s.mnt(rel + "/state")); strings.TrimSpace(string(st)) == "active" {
				t.Errorf("the session's state after its run was stopped: %q", st)
			}
		})
	}
}

// TestStoreBytesQuotaMeta: a session's meta.json, which its user writes
// (up to 1 MiB, in each of up to 100,000 sessions), counts in the bytes
// of history of its home (CTXFS_LIMITS logbytes=N): one that would grow
// past the bound is EDQUOT at its close and the old value stays; a
// smaller one gives bytes back; a restart counts the store's.
func TestStoreBytesQuotaMeta(t *testing.T) {
	const bound = 16384
	s := limitedServer(t, fmt.Sprintf("logbytes=%d", bound), nil)
	s.sendAs(uid1001, "a", "q1", "", "hello")
	metaPath := s.mnt("home/1001/agent/coder/session/a/meta.json")
	storeMeta := filepath.Join(s.sessionDir(1001, "coder", "a"), "meta.json")
	held := func() int64 { return storeHistory(t, s, 1001) }
	write := func(note int) string {
		t.Helper()
		value := fmt.Sprintf(`{"client":"ctx","scope":"private","note":%q}`, strings.Repeat("n", note))
		out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", writeEntry, metaPath, value)
		testkit.Must(t, err)
		return strings.TrimSpace(out)
	}
	if got := write(bound / 2); got != "ok" {
		t.Fatalf("a meta.json of %d bytes below the bound: %s", bound/2, got)
	}
	over := func(what string) {
		t.Helper()
		before := fileBytes(t, storeMeta)
		if got := write(bound); got != "EDQUOT" {
			t.Errorf("%s: a meta.json that takes the home past the bound: %s, want EDQUOT", what, got)
		}
		if after := fileBytes(t, storeMeta); after != before {
			t.Errorf("%s: meta.json changed by a refused write", what)
		}
		if got := held(); got > bound {
			t.Errorf("%s: the home holds %d bytes of history with meta.json, over the bound %d", what, got, bound)
		}
	}
	over("at first")
	// A smaller one gives bytes back: an append of as many fits then.
	if got := write(0); got != "ok" {
		t.Fatalf("a small meta.json: %s", got)
	}
	log := s.mnt("home/1001/agent/coder/session/a/messages.jsonl")
	room := bound - held()
	out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", appendErrno, log, stampedLine(int(room)))
	if testkit.Must(t, err); strings.TrimSpace(out) != "ok" {
		t.Fatalf("an append of the %d bytes left after meta.json shrank: %s", room, out)
	}
	s.restart(syscall.SIGTERM)
	over("after a restart")
}

// TestStoreBytesQuotaDormantCancel: a run waiting for an approval across
// a restart (no process: its call back in the waiting room) that is
// cancelled while its home is at its bound of history (CTXFS_LIMITS
// logbytes=N) still ends: its done cancelled and state are recorded past
// the bound, as a stopped run's end is. Its record was refused EDQUOT
// after the call had left the waiting room, so the run was neither
// waiting nor done, its session active until the next load.
func TestStoreBytesQuotaDormantCancel(t *testing.T) {
	const bound = 32768
	p := newFakeProvider(t, scripted(openAICall("call_1", "shell_exec", `{"argv":["true"]}`), openAIReply("never asked")))
	s := limitedServer(t, fmt.Sprintf("logbytes=%d", bound), func(s *server) {
		defineFakeModel(t, s, "openai-chat", p.URL+"/v1", nil)
		s.define("doer", map[string]string{"model": "fake/llm", "tools": "shell.exec\n", "perm": "x\n", "approval": "ask\n"})
	})
	done := s.sendAsync(owner, "k", "go")
	run := s.pendingOf(owner, 1)[0]["run"].(string)
	s.restart(syscall.SIGKILL)
	<-done
	s.pendingOf(owner, 1) // dormant: waiting again, with no process
	dir := s.sessionDirAgent(1001, "doer", "k")
	log := s.mnt("home/1001/agent/doer/session/k/messages.jsonl")
	// Fill the home to within a line's frame of its bound: halve the
	// line at each refusal.
	for n := 4096; n >= 64; {
		out, err := runCmd(t, owner, nil, "/usr/bin/python3", "-c", appendErrno, log, stampedLine(n))
		testkit.Must(t, err)
		if strings.TrimSpace(out) != "ok" {
			n /= 2
		}
	}
	if left := bound - storeHistory(t, s, 1001); left >= 200 {
		t.Fatalf("%d bytes left below the bound after filling it", left)
	}
	if f := s.answerAs(owner, fmt.Sprintf(`{"op":"cancel","id":%q,"session":"k"}`, run)); f["cancelled"] != true {
		t.Fatalf("cancel of the dormant run: %v", f)
	}
	events := fileBytes(t, filepath.Join(dir, "events.jsonl"))
	if !strings.Contains(events, `"type":"done","run":"`+run+`","status":"cancelled"`) {
		t.Errorf("the cancelled run's end is not recorded:\n%s", events)
	}
	if st := s.answerAs(owner, `{"op":"status","session":"k"}`); st["state"] == "active" {
		t.Errorf("status after the cancel: %v", st)
	}
	if got := storeHistory(t, s, 1001); got > bound+1024 {
		t.Errorf("the home holds %d bytes of history, more than a run's end past the bound %d", got, bound)
	}
}

// TestSpaceHistoryQuota: a shared space's bytes of history are bounded as
// a whole, as a home's are (CTXFS_LIMITS logbytes=N): the space's history
// is the server's in the store, with no member's uid for a count after a
// restart to find, and was not counted at all, so any member filled
// root's disk through it. Sends of two members and lines appended through
// the mount by both fill it to the byte; past it an append (a whole
// batch, not its first line), a send to a session or one making a
// session (which is then not made), a mkdir of a session and a larger
// meta.json are EDQUOT for every member and for root, and write nothing;
// another space and the member's own home are not affected; a delete
// gives the session's bytes back, exactly; and after a restart the count
// is the store's, as tight.
func TestSpaceHistoryQuota(t *testing.T) {
	const bound = 32768
	s := limitedServer(t, fmt.Sprintf("logbytes=%d", bound), nil)
	s.spaceAdd("team", 1234)
	s.spaceAdd("other", 1234)
	a, b := member(1001, 1234), member(1002, 1234)
	newcomer := member(1003, 1234) // no send yet: no coder root/ in its home
	// Its home and root's, made at their first look (not by a send).
	for home, c := range map[string]*cred{"home/1003": newcomer, "home/0": nil} {
		if out, err := bashAs(t, c, "ls "+s.mnt(home)); err != nil {
			t.Fatalf("%s: %v %q", home, err, out)
		}
	}
	team, other := `,"scope":"shared","space":"team"`, `,"scope":"shared","space":"other"`
	long := strings.Repeat("to be deleted ", 200)
	s.sendAs(a, "t1", "q1", team, "hello")
	s.sendAs(b, "t2", "q2", team, long)
	s.sendAs(b, "t3", "q3", team, long)
	sess := s.mnt("shared/team/agent/coder/session")
	log := sess + "/t1/messages.jsonl"
	held := func() int64 { return homeHistory(t, s, "shared/team") }
	// Both members' lines fill the one count: uid 1001's and 1002's
	// stamps are as long.
	appends := 0
	fill := func(what string) {
		t.Helper()
		fillHistory(t, what, bound, held, func(data string) string {
			appends++
			return appendErrnoAs(t, []*cred{a, b}[appends%2], log, data)
		})
	}
	fill("the first fill")
	refused := func(what string) {
		t.Helper()
		before := storeSnapshot(t, s)
		// A send refused is refused whole: a caller whose home has no
		// coder root/ yet (root, a member's first send) gets none made.
		for _, c := range []*cred{a, b, newcomer, nil} {
			who := what + ", as " + credName(c)
			if got := appendErrnoAs(t, c, log, stampedLine(41)); got != "EDQUOT" {
				t.Errorf("%s: an append of one short line: %s, want EDQUOT", who, got)
			}
			if got := appendErrnoAs(t, c, log, `{"role":"user","content":"a"}`+"\n"+stampedLine(2000)); got != "EDQUOT" {
				t.Errorf("%s: an append of two lines: %s, want EDQUOT", who, got)
			}
			for _, session := range []string{"t1", "new"} {
				frames, raw, err := s.requestAs(c, "coder", `{"op":"send","id":"over-`+session+`","session":"`+session+`"`+team+`,"input":"hi"}`)
				if err != nil || len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "EDQUOT" {
					t.Errorf("%s: a send to session %s: %v %s, want EDQUOT", who, session, err, raw)
				}
			}
			if out, err := bashAs(t, c, "mkdir "+sess+"/over"); err == nil || !strings.Contains(out, "Disk quota exceeded") {
				t.Errorf("%s: mkdir of a session: %v %q, want EDQUOT", who, err, out)
			}
			meta := fmt.Sprintf(`{"client":"ctx","scope":"shared","note":%q}`, strings.Repeat("n", 100))
			if out, err := runCmd(t, c, nil, "/usr/bin/python3", "-c", writeEntry, sess+"/t1/meta.json", meta); err != nil || strings.TrimSpace(out) != "EDQUOT" {
				t.Errorf("%s: a larger meta.json: %v %s, want EDQUOT", who, err, out)
			}
		}
		testkit.Same(t, what+": the store after refusals", before, storeSnapshot(t, s))
		if got := held(); got != bound {
			t.Errorf("%s: the space holds %d bytes of history, want %d", what, got, bound)
		}
	}
	refused("at the bound")

	// Another space, and the member's own home, have counts of their own.
	s.sendAs(a, "o1", "q4", other, "hello")
	s.sendAs(a, "p1", "q5", "", "hello")
	if got := appendErrnoAs(t, a, s.mnt("home/1001/agent/coder/session/p1/messages.jsonl"), stampedLine(2000)); got != "ok" {
		t.Errorf("an append in uid 1001's home beside the full space: %s", got)
	}
	if got := appendErrnoAs(t, b, s.mnt("shared/other/agent/coder/session/o1/messages.jsonl"), stampedLine(2000)); got != "ok" {
		t.Errorf("an append in another space beside the full one: %s", got)
	}

	// A delete, by any member, gives the session's bytes back, exactly: a
	// send fits again, and fill checks the count to the byte.
	del := func(c *cred, name string) {
		t.Helper()
		before := held()
		if out, errs, code := ctxSplitAs(t, s, c, "agent", "session", "gc", "coder", "--shared", "team", "--pattern", name, "--delete", "--yes"); code != 0 || !strings.Contains(out, "deleted "+name) {
			t.Fatalf("delete %s as %s: exit %d\n%s%s", name, credName(c), code, out, errs)
		}
		if freed := before - held(); freed < int64(len(long)) {
			t.Fatalf("deleting %s freed %d bytes of history", name, freed)
		}
	}
	del(a, "t2")
	s.sendAs(b, "t4", "q6", team, "a send after the delete")
	fill("after a delete")
	refused("after a delete")

	// A restart counts the store: as full as before, and exactly so.
	s.restart(syscall.SIGTERM)
	refused("after a restart")
	del(b, "t3")
	fill("after a restart and a delete")
	refused("after a restart and a delete")
}

// TestStoreBytesQuotaSnapshots: a session's snapshot of its run's rules
// (AGENTS.md, read from its user's root/ up to 1 MiB) counts in the bytes
// of history of its home (CTXFS_LIMITS logbytes=N): each new session of
// uid 1001 whose root/AGENTS.md holds 100 KiB kept 100 KiB of root's
// store uncharged, so eight sends made the home hold three times its
// bound; now a snapshot past the bound is not written (the run goes on),
// the sends past it are EDQUOT, the home holds no more than its bound,
// and a delete gives a snapshot's bytes back.
func TestStoreBytesQuotaSnapshots(t *testing.T) {
	const bound = 256 << 10
	s := limitedServer(t, fmt.Sprintf("logbytes=%d", bound), nil)
	s.sendAs(uid1001, "a", "q0", "", "hello") // its root/ is made
	rules := strings.Repeat("r", 100<<10)
	testkit.Must(t, writeAs(t, uid1001, s.mnt("home/1001/agent/coder/root/AGENTS.md"), rules))
	kept := 0
	for i := 0; i < 8; i++ {
		frames, raw, err := s.requestAs(uid1001, "coder", fmt.Sprintf(`{"op":"send","id":"s%d","session":"s%d","input":"hi"}`, i, i))
		switch {
		case err != nil || len(frames) == 0:
			t.Fatalf("send %d: %v %s", i, err, raw)
		case frames[0]["code"] == "EDQUOT":
		case frames[len(frames)-1]["type"] != "done":
			t.Fatalf("send %d: %s", i, raw)
		}
		if b, err := os.ReadFile(filepath.Join(s.store, "home/1001/agent/coder/session", fmt.Sprint("s", i), "AGENTS.md")); err == nil && strings.TrimSpace(string(b)) == rules {
			kept++
		}
	}
	s.restart(syscall.SIGTERM) // every snapshot written behind is in the store
	if got := storeHistory(t, s, 1001); got > bound {
		t.Errorf("after 8 sends with 100 KiB of rules, the home holds %d bytes of history, over its bound of %d", got, bound)
	}
	if kept == 0 || kept > 2 {
		t.Errorf("%d sessions keep their snapshot of 100 KiB, want 1 or 2 within %d bytes", kept, bound)
	}
	// A delete gives a snapshot back: a new session's send fits again.
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "gc", "coder", "--pattern", "s0", "--delete", "--yes"); code != 0 {
		t.Fatalf("delete s0: exit %d\n%s%s", code, out, errs)
	}
	s.sendAs(uid1001, "after", "q9", "", "after a delete")
	if got := storeHistory(t, s, 1001); got > bound {
		t.Errorf("after a delete and a send, the home holds %d bytes of history, over its bound of %d", got, bound)
	}
}

// TestSnapshotIsTheLatestRuns: a session's AGENTS.md is the rules of its
// latest run (SPEC 10). A run whose rules its home's history has no room
// for, or a run with no rules, leaves no snapshot, not the one before
// (older rules shown as the latest run's), and the run goes on; the bytes
// the removed snapshot held are given back: the home fills to its bound
// to the byte after.
func TestSnapshotIsTheLatestRuns(t *testing.T) {
	const bound = 64 << 10
	s := limitedServer(t, fmt.Sprintf("logbytes=%d", bound), nil)
	s.sendAs(uid1001, "a", "q0", "", "hello") // its root/ is made
	rootRules := s.mnt("home/1001/agent/coder/root/AGENTS.md")
	snap := s.mnt("home/1001/agent/coder/session/s/AGENTS.md")
	setRules := func(rules string) {
		t.Helper()
		testkit.Must(t, writeAs(t, uid1001, rootRules, rules))
	}
	sends := 0
	run := func(want string) {
		t.Helper()
		sends++
		s.sendAs(uid1001, "s", fmt.Sprint("s", sends), "", "hi")
		b, err := os.ReadFile(snap)
		switch {
		case want == "" && !errors.Is(err, syscall.ENOENT):
			t.Errorf("run %d: AGENTS.md %v %.40q, want ENOENT", sends, err, b)
		case want != "" && (err != nil || strings.TrimSpace(string(b)) != want):
			t.Errorf("run %d: AGENTS.md %v %.40q, want the run's rules", sends, err, b)
		}
	}
	first := strings.Repeat("first rules ", 100)
	setRules(first)
	run(strings.TrimSpace(first))
	setRules(strings.Repeat("x", bound)) // more than the home has room for
	run("")
	setRules(first)
	run(strings.TrimSpace(first))
	second := strings.Repeat("second rules ", 100)
	setRules(second) // replaced: its spare twin keeps the first
	run(strings.TrimSpace(second))
	settle() // the second is written to the store, behind
	testkit.Must(t, os.Remove(rootRules))
	run("")

	// What the snapshots held is given back: the home fills to its bound.
	log := s.mnt("home/1001/agent/coder/session/s/messages.jsonl")
	if out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", appendErrno, log, stampedLine(int(bound-storeHistory(t, s, 1001)))); err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("filling the bound: %v %s, want ok", err, out)
	}
	s.restart(syscall.SIGTERM) // every value written behind is in the store
	if got := storeHistory(t, s, 1001); got != bound {
		t.Errorf("after a restart the home holds %d bytes of history, want %d", got, bound)
	}
	for _, name := range []string{"AGENTS.md", ".AGENTS.md.spare"} { // its value before the last too
		if _, err := os.Stat(filepath.Join(s.store, "home/1001/agent/coder/session/s", name)); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("the store keeps %s: %v", name, err)
		}
	}
}
