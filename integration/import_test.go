package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// ctx agent import (SPEC 16): the coding-agent CLIs' session files, as the
// CLIs wrote them (agent/cli/testdata/sessions), made ctxfs sessions by
// the real client and server.

var (
	importAnn = &cred{uid: 1001, gid: 1001} // imports into her own home
	importBob = &cred{uid: 1002, gid: 1002} // another user
)

// importFile is one CLI session file of testdata and what it holds.
type importFile struct {
	from, path string
	session    *cli.Session
}

func readImportFile(t *testing.T, from, name string) importFile {
	t.Helper()
	p := filepath.Join("..", "agent", "cli", "testdata", "sessions", from, name)
	f, err := os.Open(p)
	testkit.Must(t, err)
	defer f.Close()
	s, err := cli.ReadSession(from, f)
	testkit.Must(t, err)
	return importFile{from: from, path: p, session: s}
}

// userHome makes a HOME for c (owned by c) with the files at the places
// the CLIs keep them, and returns it.
func userHome(t *testing.T, c *cred, files ...importFile) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	openToAll(t, home)
	for _, f := range files {
		dst := filepath.Join(home, ".claude", "projects", "-tmp-cc-work", f.session.ID+".jsonl")
		if f.from == cli.Codex {
			dst = filepath.Join(home, ".codex", "sessions", "2026", "12", "02", "rollout-2026-12-02T00-01-25-"+f.session.ID+".jsonl")
		}
		testkit.Must(t, os.MkdirAll(filepath.Dir(dst), 0o700))
		testkit.Must(t, os.WriteFile(dst, []byte(fileBytes(t, f.path)), 0o600))
	}
	chownTree(t, home, c)
	return home
}

func chownTree(t *testing.T, dir string, c *cred) {
	t.Helper()
	testkit.Must(t, filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(c.uid), int(c.gid))
	}))
}

// ctxImport runs ctx agent import AGENT as c (nil: root) with HOME home and
// returns its stdout and stderr together, and its exit status.
func (s *server) ctxImport(c *cred, home, agent string, args ...string) (string, int) {
	s.t.Helper()
	out, err := runCmd(s.t, c, []string{"CTX_ROOT=" + s.root, "HOME=" + home}, ctxBin, append([]string{"agent", "import", agent}, args...)...)
	return out, exitCode(s.t, err)
}

func exitCode(t testing.TB, err error) int {
	if ee, ok := err.(interface{ ExitCode() int }); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// importedLines reads an imported session's messages.jsonl through the
// mount as c.
func (s *server) importedLines(t *testing.T, c *cred, uid uint32, id string) []map[string]any {
	t.Helper()
	out, err := bashAs(t, c, fmt.Sprintf("cat %s", s.mnt(fmt.Sprintf("home/%d/agent/coder/session/%s/messages.jsonl", uid, id))))
	if err != nil {
		t.Fatalf("cat messages.jsonl as %s: %v\n%s", credName(c), err, out)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var m map[string]any
		testkit.Must(t, json.Unmarshal([]byte(l), &m))
		lines = append(lines, m)
	}
	return lines
}

// checkImported: the session holds the file's messages in order (roles,
// tool calls, tool results), each marked imported, without a run id,
// stamped with the importer's uid; by-uuid names it; meta.json records
// the CLI's session.
func (s *server) checkImported(t *testing.T, f importFile, uid, by uint32) {
	t.Helper()
	owner := &cred{uid: uid, gid: uid}
	lines := s.importedLines(t, owner, uid, f.session.ID)
	if len(lines) != len(f.session.Messages) {
		t.Fatalf("%s: %d lines imported, the file holds %d messages", f.path, len(lines), len(f.session.Messages))
	}
	var calls, results int
	for i, l := range lines {
		want := f.session.Messages[i]
		if l["role"] != want.Str("role") || l["imported"] != f.from || l["run"] != nil || l["uid"] != float64(by) {
			t.Errorf("%s line %d: %v (want role %s, imported %s, no run, uid %d)", f.path, i+1, l, want.Str("role"), f.from, by)
		}
		b, _ := json.Marshal(l["content"])
		calls += strings.Count(string(b), `"type":"tool_call"`)
		results += strings.Count(string(b), `"type":"tool_result"`)
	}
	if calls == 0 || results == 0 {
		t.Errorf("%s: %d tool calls and %d results imported", f.path, calls, results)
	}
	dir := fmt.Sprintf("home/%d/agent/coder/", uid)
	if got := s.readMnt(dir + "session/index/by-uuid/" + f.session.ID); got != f.session.ID+"\n" {
		t.Errorf("index/by-uuid/%s holds %q", f.session.ID, got)
	}
	var meta map[string]any
	testkit.Must(t, json.Unmarshal([]byte(s.readMnt(dir+"session/"+f.session.ID+"/meta.json")), &meta))
	if meta["cli_session"] != f.session.ID || meta["cli"] != f.from {
		t.Errorf("meta.json: %v", meta)
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck after the import: exit %d\n%s", code, out)
	}
	env := []string{"CTX_ROOT=" + s.root}
	out, err := runCmd(t, owner, env, ctxBin, "agent", "history", "coder", "--session", f.session.ID)
	if first := f.session.Messages[0].Str("content"); err != nil || !strings.Contains(out, first) {
		t.Errorf("ctx agent history of the imported session: %v, want %q in\n%s", err, first, out)
	}
	if out, err := runCmd(t, owner, env, ctxBin, "agent", "trajectory", "coder", "--session", f.session.ID); err != nil {
		t.Errorf("ctx agent trajectory of the imported session: %v\n%.2000s", err, out)
	}
}

// TestImportClaudeCodeAndCodex: a user imports a Claude Code project file
// from her ~/.claude/projects (the default) and a Codex rollout from a
// directory she names; each becomes one session with its messages, tool
// calls and results in order, by-uuid set, and the CLI's file copied
// under the agent's HOME for the resume.
func TestImportClaudeCodeAndCodex(t *testing.T) {
	s := newFuseServer(t)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	codex := readImportFile(t, cli.Codex, "tool.jsonl")
	home := userHome(t, importAnn, claude, codex)

	out, code := s.ctxImport(importAnn, home, "coder", "--from", "claude-code")
	if code != 0 || !strings.Contains(out, "imported ") || !strings.Contains(out, claude.session.ID) {
		t.Fatalf("import of ~/.claude/projects: exit %d\n%s", code, out)
	}
	s.checkImported(t, claude, importAnn.uid, importAnn.uid)
	s.waitLogText(`msg=import agent=coder session=` + claude.session.ID + ` home=home/1001 uid=1001`) // who imported what
	kept := s.mnt("home/1001/agent/coder/root/home/agent/.claude/projects/-tmp-cc-work/" + claude.session.ID + ".jsonl")
	if fileBytes(t, kept) != fileBytes(t, claude.path) {
		t.Errorf("the Claude Code file was not kept under the agent's HOME for its resume (%s)", kept)
	}

	out, code = s.ctxImport(importAnn, home, "coder", "--from", "codex", filepath.Join(home, ".codex", "sessions", "2026"))
	if code != 0 || !strings.Contains(out, codex.session.ID) {
		t.Fatalf("import of a Codex directory: exit %d\n%s", code, out)
	}
	s.checkImported(t, codex, importAnn.uid, importAnn.uid)
}

// waitListed waits until the store's index/list of uid's coder holds id:
// the list is written behind the import, and a snapshot taken before
// that would see it change.
func (s *server) waitListed(t *testing.T, uid uint32, id string) {
	t.Helper()
	list := filepath.Join(s.store, "home", fmt.Sprint(uid), "agent", "coder", "session", "index", "list")
	eventually(t, 10*time.Second, "index/list holds "+id, func() bool {
		b, _ := os.ReadFile(list)
		return strings.Contains(string(b), id)
	})
}

// storeHome is a snapshot of a uid's home in the store, for "nothing
// written" (atimes apart: a refusal may read).
func (s *server) storeHome(t *testing.T, uid uint32) map[string]string {
	t.Helper()
	snap := hostSnapshot(t, filepath.Join(s.store, "home", fmt.Sprint(uid)))
	for k := range snap {
		if strings.HasSuffix(k, atimeKey) {
			delete(snap, k)
		}
	}
	return snap
}

func (s *server) wantUnchanged(t *testing.T, what string, before map[string]string, uid uint32) {
	t.Helper()
	if diffs, _ := hostDiffs(before, s.storeHome(t, uid)); len(diffs) > 0 {
		t.Errorf("%s wrote to the store: %v", what, diffs)
	}
}

// TestImportRefusals: importing a uuid again is EEXIST; a malformed file
// is EINVAL naming its line; a file the caller cannot read is EACCES;
// each writes nothing (the store's home byte for byte).
func TestImportRefusals(t *testing.T) {
	s := newFuseServer(t)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	home := userHome(t, importAnn, claude)
	file := filepath.Join(home, ".claude", "projects", "-tmp-cc-work", claude.session.ID+".jsonl")
	if out, code := s.ctxImport(importAnn, home, "coder", "--from", "claude-code", file); code != 0 {
		t.Fatalf("first import: exit %d\n%s", code, out)
	}
	s.waitListed(t, importAnn.uid, claude.session.ID)

	before := s.storeHome(t, importAnn.uid)
	out, code := s.ctxImport(importAnn, home, "coder", "--from", "claude-code", file)
	if code != 1 || !strings.Contains(out, "EEXIST") {
		t.Errorf("import again: exit %d, want 1 and EEXIST\n%s", code, out)
	}
	s.wantUnchanged(t, "an import of a uuid already imported", before, importAnn.uid)

	// A copy of another session whose third line is cut: EINVAL line 3.
	other := readImportFile(t, cli.ClaudeCode, "resumed.jsonl")
	lines := strings.SplitAfter(fileBytes(t, other.path), "\n")
	lines[2] = lines[2][:len(lines[2])/2] + "\n"
	bad := filepath.Join(home, "bad.jsonl")
	testkit.Must(t, os.WriteFile(bad, []byte(strings.Join(lines, "")), 0o600))
	testkit.Must(t, os.Chown(bad, int(importAnn.uid), int(importAnn.gid)))
	out, code = s.ctxImport(importAnn, home, "coder", "--from", "claude-code", bad)
	if code != 1 || !strings.Contains(out, "EINVAL") || !strings.Contains(out, "line 3") {
		t.Errorf("malformed file: exit %d, want 1, EINVAL and line 3\n%s", code, out)
	}
	s.wantUnchanged(t, "an import of a malformed file", before, importAnn.uid)

	// Root's file, mode 0600: she cannot read it.
	secret := filepath.Join(filepath.Dir(home), "root-only.jsonl")
	testkit.Must(t, os.WriteFile(secret, []byte(fileBytes(t, other.path)), 0o600))
	out, code = s.ctxImport(importAnn, home, "coder", "--from", "claude-code", secret)
	if code != 1 || !strings.Contains(out, "EACCES") || !strings.Contains(out, secret) {
		t.Errorf("unreadable file: exit %d, want 1, EACCES and its name\n%s", code, out)
	}
	s.wantUnchanged(t, "an import of an unreadable file", before, importAnn.uid)
}

// TestImportUids: root imports for root without --uid and, with it, for
// 1001 from 1001's files (read as 1001: TestImportForUidReadsAsUid); a
// user's --uid naming another is EACCES at the server, nothing written;
// another user cannot read the imported session.
func TestImportUids(t *testing.T) {
	s := newFuseServer(t)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	codex := readImportFile(t, cli.Codex, "tool.jsonl")
	home := userHome(t, &cred{}, claude)
	annHome := userHome(t, importAnn, codex)

	if out, code := s.ctxImport(nil, home, "coder", "--from", "claude-code"); code != 0 {
		t.Fatalf("root's import: exit %d\n%s", code, out)
	}
	s.checkImported(t, claude, 0, 0)
	if out, code := s.ctxImport(nil, home, "coder", "--from", "codex", "--uid", "1001", filepath.Join(annHome, ".codex", "sessions")); code != 0 {
		t.Fatalf("root's import for 1001: exit %d\n%s", code, out)
	}
	s.checkImported(t, codex, 1001, 0)
	kept := s.mnt("home/1001/agent/coder/root/home/agent/.codex/sessions/2026/12/02/rollout-2026-12-02T00-01-25-" + codex.session.ID + ".jsonl")
	if fileBytes(t, kept) != fileBytes(t, codex.path) {
		t.Errorf("the rollout root imported for 1001 is not under the agent's HOME (%s)", kept)
	}
	if out, err := bashAs(t, importAnn, "test -O "+kept+" && head -c1 "+kept); err != nil {
		t.Errorf("the rollout root imported for 1001 is not hers under the agent's HOME: %v\n%s", err, out)
	}
	if uid := statUid(t, s.mnt("home/1001/agent/coder/session/"+codex.session.ID)); uid != 1001 {
		t.Errorf("the session root imported for 1001 shows owner %d through the mount", uid)
	}

	// Bob names Ann's home: refused by the server, whatever his client says.
	bobHome := userHome(t, importBob, readImportFile(t, cli.ClaudeCode, "resumed.jsonl"))
	before := s.storeHome(t, importAnn.uid)
	out, code := s.ctxImport(importBob, bobHome, "coder", "--from", "claude-code", "--uid", "1001")
	if code != 1 || !strings.Contains(out, "EACCES") {
		t.Errorf("bob importing into 1001's home: exit %d, want 1 and EACCES\n%s", code, out)
	}
	s.wantUnchanged(t, "bob's import into 1001's home", before, importAnn.uid)
	msgs := s.mnt("home/1001/agent/coder/session/" + codex.session.ID + "/messages.jsonl")
	if out, err := bashAs(t, importBob, "cat "+msgs); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("bob reading 1001's imported session: %v\n%s", err, out)
	}
}

func statUid(t *testing.T, p string) uint32 {
	t.Helper()
	st, err := os.Stat(p)
	testkit.Must(t, err)
	return st.Sys().(*syscall.Stat_t).Uid
}

// importRequest is a python3 client that sends the file argv[2] (the
// import request, then the messages) on one connection to the socket
// argv[1] as the uid running it, and prints the reply; with argv[3]
// "hold" it then keeps the connection open without a word.
const importRequest = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(60)
s.connect(sys.argv[1])
try:
    s.sendall(open(sys.argv[2], "rb").read())
    if sys.argv[3] != "hold":  # hold: leave the connection open, sending nothing more
        s.shutdown(socket.SHUT_WR)
except (BrokenPipeError, ConnectionResetError):
    pass
while True:
    try:
        d = s.recv(65536)
    except ConnectionResetError:
        break  # the server refused before reading all: its frame came first
    if not d:
        break
    sys.stdout.buffer.write(d)
`

// rawImport sends lines as c on one connection to coder's socket and
// returns the reply's error code ("" for none) and the reply.
func (s *server) rawImport(t *testing.T, c *cred, lines ...string) (string, string) {
	t.Helper()
	return s.rawImportHow(t, c, "", lines...)
}

// rawImportHow is rawImport; how "hold" keeps the connection open after
// the lines.
func (s *server) rawImportHow(t *testing.T, c *cred, how string, lines ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	openToAll(t, filepath.Join(dir, "x"))
	script, data := filepath.Join(dir, "import.py"), filepath.Join(dir, "lines")
	testkit.Must(t, os.WriteFile(script, []byte(importRequest), 0o644))
	testkit.Must(t, os.WriteFile(data, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	out, err := runCmd(t, c, nil, "/usr/bin/python3", script, s.mnt("agent/coder.sock"), data, how)
	if err != nil {
		t.Fatalf("raw import: %v\n%s", err, out)
	}
	var f map[string]any
	json.Unmarshal(bytes.TrimSpace([]byte(out)), &f)
	code, _ := f["code"].(string)
	return code, out
}

// TestImportHostileClient: the server judges what a client sends, not
// what ctx would send: another uid's home, a run id, a role that is not a
// message's, the marker, fewer messages than announced, a line over the
// request bound, more unfinished bytes than the uid's share. Each is
// refused with its errno and writes nothing.
func TestImportHostileClient(t *testing.T) {
	s := newFuseServer(t)
	const id = "0f19e0aa-0000-4000-8000-00000000cafe"
	head := func(n int, extra string) string {
		return fmt.Sprintf(`{"op":"import","from":"claude-code","uuid":%q,"messages":%d%s}`, id, n, extra)
	}
	user := `{"role":"user","content":"hi"}`
	big := fmt.Sprintf(`{"role":"user","content":%q}`, strings.Repeat("x", 1000*1000))
	bigs := make([]string, 20)
	for i := range bigs {
		bigs[i] = big
	}
	// Ann's home exists (a first import) so that a refusal has something to leave alone.
	if code, out := s.rawImport(t, importAnn, head(1, ""), user); code != "" {
		t.Fatalf("a well-formed raw import: %s", out)
	}
	s.waitListed(t, importAnn.uid, id)
	cases := []struct {
		name  string
		as    *cred
		lines []string
		want  string
	}{
		{"another uid's home", importBob, []string{head(1, `,"uid":1001`), user}, "EACCES"},
		{"a run id", importAnn, []string{head(1, ""), `{"role":"user","run":"ctx-00000000000000000000000000000000","content":"hi"}`}, "EINVAL"},
		{"not a message", importAnn, []string{head(1, ""), `{"type":"start","content":"x"}`}, "EINVAL"},
		{"the marker", importAnn, []string{head(1, ""), `{"role":"user","content":"hi","imported":"codex"}`}, "EINVAL"},
		{"another writer's uid", importAnn, []string{head(1, ""), `{"role":"user","content":"hi","uid":1002}`}, "EINVAL"},
		{"fewer messages than announced", importAnn, []string{head(3, ""), user, user}, "EINVAL"},
		{"a uuid of another shape", importAnn, []string{strings.Replace(head(1, ""), id, "../x", 1), user}, "EINVAL"},
		{"a line over the request bound", importAnn, []string{head(1, ""), strings.Repeat(" ", 1<<20) + user}, "EMSGSIZE"},
		{"more than the uid's share of unfinished bytes", importAnn, append([]string{head(20, "")}, bigs...), "EAGAIN"},
	}
	for _, c := range cases {
		before := s.storeHome(t, importAnn.uid)
		code, out := s.rawImport(t, c.as, c.lines...)
		if code != c.want {
			t.Errorf("%s: got %q, want %s\n%.300s", c.name, code, c.want, out)
		}
		s.wantUnchanged(t, c.name, before, importAnn.uid)
	}
	// A client that stops sending holds its bytes for 10 s at the most.
	before := s.storeHome(t, importAnn.uid)
	if code, out := s.rawImportHow(t, importAnn, "hold", head(2, ""), user); code != "ETIMEDOUT" {
		t.Errorf("a stalled import: got %q, want ETIMEDOUT\n%s", code, out)
	}
	s.wantUnchanged(t, "a stalled import", before, importAnn.uid)
	// The share is given back: the same uid imports again at once.
	if code, out := s.rawImport(t, importAnn, strings.Replace(head(1, ""), "cafe", "beef", 1), user); code != "" {
		t.Errorf("an import after the refusals: %s", out)
	}
}

// TestImportFailingLateLeavesNothing: an import that fails after its
// session was renamed into place (here the agent's root/ cannot be made:
// root planted a file there; a full disk's mkdir alike) left that session
// in the store with no index entry: not in index/list, no by-uuid, and a
// second import of the uuid, once the cause was gone, was EEXIST. root/
// is made first now: the import fails with nothing of it written, and
// the second one imports.
func TestImportFailingLateLeavesNothing(t *testing.T) {
	s := newFuseServer(t)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	home := userHome(t, importAnn, claude)
	if out, err := runCmd(t, importAnn, nil, "mkdir", "-p", s.mnt("home/1001/agent/coder")); err != nil {
		t.Fatalf("mkdir of the agent as uid 1001: %v %s", err, out)
	}
	rootDir := filepath.Join(s.store, "home/1001/agent/coder/root")
	testkit.Must(t, os.Remove(rootDir))
	testkit.Must(t, os.WriteFile(rootDir, nil, 0o600))
	out, code := s.ctxImport(importAnn, home, "coder", "--from", "claude-code")
	if code == 0 {
		t.Fatalf("an import whose root/ cannot be made: exit 0\n%s", out)
	}
	if _, err := os.Lstat(filepath.Join(s.store, "home/1001/agent/coder/session", claude.session.ID)); err == nil {
		t.Errorf("a failed import left its session in the store (listed: %v)", strings.Contains(s.readMnt("home/1001/agent/coder/session/index/list"), claude.session.ID))
	}
	testkit.Must(t, os.Remove(rootDir))
	out, code = s.ctxImport(importAnn, home, "coder", "--from", "claude-code")
	if code != 0 {
		t.Fatalf("the import again, root/ free: exit %d\n%s", code, out)
	}
	s.checkImported(t, claude, importAnn.uid, importAnn.uid)
}

// TestImportCopyRefusedLeavesNoPart: the CLI's file is copied under the
// agent's HOME for its resume, and that copy fails midway (the file, 2
// MiB of Claude Code's own bookkeeping besides the messages, is over uid
// 1001's 1 MiB of free-tree bytes: EDQUOT). The session is imported and
// the failure said; no part of the file is left at the name the CLI
// resumes from, which it would take for the whole conversation.
func TestImportCopyRefusedLeavesNoPart(t *testing.T) {
	s := limitedServer(t, "freebytes=1048576", nil)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	home := userHome(t, importAnn, claude)
	file := filepath.Join(home, ".claude", "projects", "-tmp-cc-work", claude.session.ID+".jsonl")
	pad := fmt.Sprintf(`{"type":"queue-operation","operation":"enqueue","sessionId":%q,"content":%q}`+"\n", claude.session.ID, strings.Repeat("x", 1<<20))
	testkit.Must(t, os.WriteFile(file, []byte(fileBytes(t, claude.path)+pad+pad), 0o600))
	chownTree(t, home, importAnn)

	out, code := s.ctxImport(importAnn, home, "coder", "--from", "claude-code")
	if code != 1 || !strings.Contains(out, "imported "+file) || !strings.Contains(out, "EDQUOT") {
		t.Fatalf("want the session imported and the copy refused EDQUOT (exit 1); exit %d\n%s", code, out)
	}
	s.checkImported(t, claude, importAnn.uid, importAnn.uid)
	dir := s.mnt("home/1001/agent/coder/root/home/agent/.claude/projects/-tmp-cc-work")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		st, _ := e.Info()
		t.Errorf("the failed copy left %s (%d of %d bytes) under the agent's HOME", e.Name(), st.Size(), len(fileBytes(t, file)))
	}
}

// TestImportSplitsLargeReply: a Codex rollout whose reply made twenty
// parallel calls of 60 KiB arguments each. As the CLI's reader maps it,
// that reply is several assistant messages, in order, each a line the
// server takes (one line of all twenty, 1.2 MB, was over the 1 MiB bound,
// and the whole import was refused EINVAL); every call and result is
// imported.
func TestImportSplitsLargeReply(t *testing.T) {
	s := newFuseServer(t)
	const id = "7d1a6c1e-5a0b-4c8e-9f3e-2b7d9c0e1f2a"
	var b strings.Builder
	fmt.Fprintf(&b, `{"timestamp":"2026-12-02T00:01:25Z","type":"session_meta","payload":{"id":%q,"cwd":"/tmp/cx-work"}}`+"\n", id)
	b.WriteString(`{"timestamp":"2026-12-02T00:01:26Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"write twenty files"}]}}` + "\n")
	for i := 0; i < 20; i++ {
		args := fmt.Sprintf(`{"cmd":"printf %s > f%d"}`, strings.Repeat("a", 60<<10), i)
		fmt.Fprintf(&b, `{"timestamp":"2026-12-02T00:01:27Z","type":"response_item","payload":{"type":"function_call","name":"shell","call_id":"call_%d","arguments":%q}}`+"\n", i, args)
	}
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&b, `{"timestamp":"2026-12-02T00:01:28Z","type":"response_item","payload":{"type":"function_call_output","call_id":"call_%d","output":"ok"}}`+"\n", i)
	}
	home := filepath.Join(t.TempDir(), "home")
	openToAll(t, home)
	file := filepath.Join(home, ".codex", "sessions", "2026", "12", "02", "rollout-2026-12-02T00-01-25-"+id+".jsonl")
	testkit.Must(t, os.MkdirAll(filepath.Dir(file), 0o700))
	testkit.Must(t, os.WriteFile(file, []byte(b.String()), 0o600))
	chownTree(t, home, importAnn)
	session, err := cli.ReadSession(cli.Codex, strings.NewReader(b.String()))
	testkit.Must(t, err)

	out, code := s.ctxImport(importAnn, home, "coder", "--from", "codex")
	if code != 0 {
		t.Fatalf("import of a reply of twenty 60 KiB calls: exit %d\n%.2000s", code, out)
	}
	s.checkImported(t, importFile{from: cli.Codex, path: file, session: session}, importAnn.uid, importAnn.uid)
	calls := 0
	for _, l := range s.importedLines(t, importAnn, importAnn.uid, id) {
		if l["role"] == "assistant" {
			b, _ := json.Marshal(l["content"])
			calls += strings.Count(string(b), `"type":"tool_call"`)
		}
	}
	if calls != 20 {
		t.Errorf("%d of the 20 calls imported", calls)
	}
}

// TestImportSymlinkedDir: the directory an import walks is a symlink of
// the user's (a dotfiles manager's ~/.codex/sessions, say): its session
// files are imported, not none with exit 0.
func TestImportSymlinkedDir(t *testing.T) {
	s := newFuseServer(t)
	codex := readImportFile(t, cli.Codex, "tool.jsonl")
	home := userHome(t, importAnn, codex)
	sessions := filepath.Join(home, ".codex", "sessions")
	kept := filepath.Join(home, "dotfiles", "codex-sessions")
	testkit.Must(t, os.MkdirAll(filepath.Dir(kept), 0o700))
	testkit.Must(t, os.Rename(sessions, kept))
	testkit.Must(t, os.Symlink(kept, sessions))
	chownTree(t, home, importAnn)

	out, code := s.ctxImport(importAnn, home, "coder", "--from", "codex")
	if code != 0 || !strings.Contains(out, "imported "+sessions) || !strings.Contains(out, codex.session.ID) {
		t.Fatalf("import of a symlinked ~/.codex/sessions: exit %d\n%s", code, out)
	}
	s.checkImported(t, codex, importAnn.uid, importAnn.uid)
}

// TestImportPastNamesBoundMakesNothing: an import keeps two names, its
// session and its by-uuid entry (CTXFS_LIMITS names=N). With room for
// one, the session was made and the entry refused EDQUOT: the import
// failed, yet left a session that no by-uuid entry names (an import
// again then found the uuid taken, EEXIST). Both are charged before the
// session is made now: the import is refused EDQUOT and makes none.
func TestImportPastNamesBoundMakesNothing(t *testing.T) {
	s, claude := importRefused(t, "names=1", "the names bound")
	if _, err := os.Lstat(filepath.Join(s.store, "home/1001/agent/coder/session", claude.session.ID)); err == nil {
		t.Errorf("an import refused EDQUOT left its session in the store")
	}
	// Nor its agent (until 2026-12-05 it did: the names were charged as
	// the session was made, after the agent).
	if _, err := os.Lstat(filepath.Join(s.store, "home/1001/agent/coder")); err == nil {
		t.Errorf("an import refused EDQUOT made its agent")
	}
	// What the refusal reserved was given back: one name is still free.
	sessions := s.mnt("home/1001/agent/coder/session")
	if out, err := bashAs(t, importAnn, "mkdir -p "+sessions+"/one"); err != nil {
		t.Errorf("mkdir of a session after the refused import (names=1): %v %q", err, out)
	}
	if out, err := bashAs(t, importAnn, "mkdir "+sessions+"/two"); err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Errorf("mkdir of a second session (names=1): %v %q, want EDQUOT", err, out)
	}
}

// TestImportChargesItsAgent: an import into an agent the home lacks
// makes that agent (its root/, for the resume), one of the home's agents
// (CTXFS_LIMITS agents=N), as a first send or a mkdir is: it made the
// agent's root/ first, by hand, so once the home's agents were counted
// (here by a mkdir) an import's agent was never charged, and imports
// made agents past the bound.
func TestImportChargesItsAgent(t *testing.T) {
	s := limitedServer(t, "agents=2", nil)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	home := userHome(t, importAnn, claude)
	agents := s.mnt("home/1001/agent")
	if out, err := bashAs(t, importAnn, "mkdir -p "+agents+"/x0"); err != nil {
		t.Fatalf("mkdir of a first agent: %v %q", err, out)
	}
	if out, code := s.ctxImport(importAnn, home, "coder", "--from", "claude-code"); code != 0 {
		t.Fatalf("an import into a second agent: exit %d\n%s", code, out)
	}
	if out, err := bashAs(t, importAnn, "mkdir "+agents+"/x1"); err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Errorf("mkdir of a third agent after an import made the second (agents=2): %v %q, want EDQUOT", err, out)
	}
}

// TestImportPastHistoryBoundMakesNoAgent: an import refused EDQUOT at the
// uid's bound on history (CTXFS_LIMITS logbytes=N) into an agent the
// home lacked made the agent (its root/, one of the home's agents) before
// the session's bytes were charged: the command failed, yet the user's
// tree had a new agent. The bytes are judged before anything is made
// now: the import is refused EDQUOT and the home holds no agent.
func TestImportPastHistoryBoundMakesNoAgent(t *testing.T) {
	s, _ := importRefused(t, "logbytes=512", "the history bound")
	if _, err := os.Lstat(filepath.Join(s.store, "home/1001/agent/coder")); err == nil {
		t.Errorf("an import refused EDQUOT made its agent in the store")
	}
	if out, err := bashAs(t, importAnn, "ls -A "+s.mnt("home/1001/agent")+" 2>/dev/null; true"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("agents through the mount after a refused import: %v %q, want none", err, out)
	}
}

// importRefused imports a Claude Code session as uid 1001 into agent
// coder of a server with CTXFS_LIMITS limits, which must refuse it
// EDQUOT (past the bound named what).
func importRefused(t *testing.T, limits, what string) (*server, importFile) {
	t.Helper()
	s := limitedServer(t, limits, nil)
	claude := readImportFile(t, cli.ClaudeCode, "tool.jsonl")
	home := userHome(t, importAnn, claude)
	out, code := s.ctxImport(importAnn, home, "coder", "--from", "claude-code")
	if code == 0 || !strings.Contains(out, "EDQUOT") {
		t.Fatalf("an import past %s: exit %d, want EDQUOT\n%s", what, code, out)
	}
	return s, claude
}
