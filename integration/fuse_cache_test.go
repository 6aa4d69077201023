package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
)

// The kernel keeps the ABI's names, attributes and small files' pages for
// a long time (fs/node.go); only invalidation keeps them exact. Every test
// here first has a reader cache the files (a stat and a read through the
// mount), then changes them, then looks again at once: no sleep, no retry.

// Log readers keep the page cache across opens (FOPEN_KEEP_CACHE). A
// reader that opens again after appends must see exactly the store's
// bytes: never a stale end, never zeros where new lines are.
func TestKeptCacheSeesAppends(t *testing.T) {
	s := newFuseServer(t)
	s.send("cache", "c0", "first")
	mntLog := s.mnt(sessRel("cache") + "/messages.jsonl")
	storeLog := filepath.Join(s.store, sessRel("cache"), "messages.jsonl")
	held, err := os.Open(mntLog) // a reader that stays open meanwhile
	testkit.Must(t, err)
	defer held.Close()
	for i := 1; i <= 20; i++ {
		got, err := os.ReadFile(mntLog) // warms the cache, then must see the next append
		testkit.Must(t, err)
		if want := fileBytes(t, storeLog); string(got) != want {
			t.Fatalf("before append %d: mount shows %d bytes, store has %d", i, len(got), len(want))
		}
		if i%2 == 0 {
			s.send("cache", fmt.Sprintf("c%d", i), fmt.Sprintf("message %d", i))
		} else {
			testkit.Must(t, appendMnt(mntLog, fmt.Sprintf(`{"role":"user","content":"direct %d"}`+"\n", i)))
		}
	}
	got, err := os.ReadFile(mntLog)
	testkit.Must(t, err)
	if want := fileBytes(t, storeLog); string(got) != want || bytes.IndexByte(got, 0) >= 0 {
		t.Fatalf("after the appends: mount %d bytes, store %d", len(got), len(want))
	}
}

// watched is a file a reader keeps cached: its path under the mount, and
// what it must hold now.
type watched struct {
	rel  string
	want func() string
}

// cacheReader stats and reads files through the mount, in this process
// (root) or, with c, in a python3 process running as c: the kernel's
// caches are the inode's, whoever filled them.
type cacheReader struct {
	s *server
	c *cred
}

// statRead is one look at a file: its size by stat, and its bytes.
type statRead struct {
	size int64
	data string
	err  error
}

// lookReader is the python3 program of a reader of another uid: one line
// "size hex-bytes" (or "error message") per file.
const lookReader = `
import os, sys
for p in sys.argv[1:]:
    try:
        st = os.stat(p)
        with open(p, 'rb') as f:
            b = f.read()
        print(st.st_size, b.hex() or '-')
    except OSError as e:
        print('error', e.strerror.replace(' ', '_'))
`

func (r cacheReader) look(rels ...string) []statRead {
	r.s.t.Helper()
	out := make([]statRead, len(rels))
	if r.c == nil {
		for i, rel := range rels {
			st, err := os.Stat(r.s.mnt(rel))
			if err != nil {
				out[i].err = err
				continue
			}
			b, err := os.ReadFile(r.s.mnt(rel))
			out[i] = statRead{size: st.Size(), data: string(b), err: err}
		}
		return out
	}
	args := []string{"-c", lookReader}
	for _, rel := range rels {
		args = append(args, r.s.mnt(rel))
	}
	text, err := runCmd(r.s.t, r.c, nil, "/usr/bin/python3", args...)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if err != nil || len(lines) != len(rels) {
		r.s.t.Fatalf("reader %s: %v\n%s", credName(r.c), err, text)
	}
	for i, l := range lines {
		var size, data string
		fmt.Sscan(l, &size, &data)
		if size == "error" {
			out[i].err = fmt.Errorf("%s", data)
			continue
		}
		fmt.Sscan(size, &out[i].size)
		if data != "-" {
			b, _ := hex.DecodeString(data)
			out[i].data = string(b)
		}
	}
	return out
}

// exact looks at every watched file and fails the test for each whose
// stat size or content is not what it holds now.
func (r cacheReader) exact(what string, files []watched) {
	r.s.t.Helper()
	rels := make([]string, len(files))
	for i, f := range files {
		rels[i] = f.rel
	}
	for i, got := range r.look(rels...) {
		want := files[i].want()
		switch {
		case got.err != nil:
			r.s.t.Errorf("%s: %s as %s: %v", what, files[i].rel, credName(r.c), got.err)
		case got.size != int64(len(want)) || got.data != want:
			r.s.t.Errorf("%s: %s as %s: stat %d bytes, read %q; it holds %d bytes %q",
				what, files[i].rel, credName(r.c), got.size, clip(got.data), len(want), clip(want))
		}
	}
}

// clip shortens what an error message shows of a file.
func clip(s string) string {
	if len(s) > 120 {
		return "…" + s[len(s)-120:]
	}
	return s
}

// storeFile is what the store holds at rel (the store is the truth).
func (s *server) storeFile(rel string) func() string {
	return func() string { return fileBytes(s.t, filepath.Join(s.store, rel)) }
}

// sessionFiles are the files of a session and what each holds now: the
// store's file, or for the files derived from the logs, which reach the
// store behind (session/value_derived.go), what the server says without the
// mount (status, through the socket) or what the logs say.
func (s *server) sessionFiles(dir string) []watched {
	var out []watched
	for _, f := range []string{"messages.jsonl", "events.jsonl", "cwd", "created_at", "meta.json"} {
		out = append(out, watched{dir + "/" + f, s.storeFile(dir + "/" + f)})
	}
	status := func(field string) func() string {
		return func() string { return fmt.Sprint(s.sessionStatus(dir)[field]) + "\n" }
	}
	return append(out,
		watched{dir + "/state", status("state")},
		watched{dir + "/updated_at", status("updated_at")},
		watched{dir + "/latest.md", func() string { return latestOf(fileBytes(s.t, filepath.Join(s.store, dir, "messages.jsonl"))) }})
}

// sessionStatus is the status frame of the session at dir (a store path),
// asked as root through its agent's socket.
func (s *server) sessionStatus(dir string) frame {
	s.t.Helper()
	parts := strings.Split(dir, "/") // home/<uid> or shared/<space>, agent, <name>, session, <session>
	extra := ""
	if parts[0] == "shared" {
		extra = `,"scope":"shared","space":"` + parts[1] + `"`
	}
	fr, err := s.request(parts[3], `{"op":"status","session":"`+parts[5]+`"`+extra+`}`)
	if err != nil || len(fr) != 1 {
		s.t.Fatalf("status of %s: %v %v", dir, fr, err)
	}
	if u, ok := fr[0]["updated_at"].(float64); ok {
		fr[0]["updated_at"] = int64(u)
	}
	return fr[0]
}

// latestOf is what latest.md holds after messages: the text of the last
// assistant message and a newline, or nothing before the first.
func latestOf(messages string) string {
	latest := ""
	for _, line := range strings.Split(strings.TrimSuffix(messages, "\n"), "\n") {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if line == "" || json.Unmarshal([]byte(line), &m) != nil || m.Role != "assistant" {
			continue
		}
		latest = proto.ContentText(m.Content) + "\n"
	}
	return latest
}

// writeMnt replaces a value through the mount as `printf > file` does.
func writeMnt(t testing.TB, path, value string) {
	t.Helper()
	testkit.Must(t, os.WriteFile(path, []byte(value), 0))
}

// A writer that keeps one descriptor open and appends line after line
// (no OPEN between its writes) is not announced to the kernel by the
// server: the kernel marks the size and times stale itself when each
// WRITE is answered (fs/notify.go). A reader that stat'ed and read the
// log before each write sees the exact size and bytes at once after it,
// through a descriptor of its own held open too, also when a send
// appends to the same log between the writes.
func TestCacheExactHeldWriter(t *testing.T) {
	s := newFuseServer(t)
	s.send("held", "c0", "first")
	mntLog := s.mnt(sessRel("held") + "/messages.jsonl")
	storeLog := filepath.Join(s.store, sessRel("held"), "messages.jsonl")
	w, err := os.OpenFile(mntLog, os.O_WRONLY|os.O_APPEND, 0)
	testkit.Must(t, err)
	defer w.Close()
	r, err := os.Open(mntLog)
	testkit.Must(t, err)
	defer r.Close()
	look := func(what string) {
		t.Helper()
		want := fileBytes(t, storeLog)
		st, err := os.Stat(mntLog)
		testkit.Must(t, err)
		fst, err := r.Stat()
		testkit.Must(t, err)
		got, err := os.ReadFile(mntLog)
		testkit.Must(t, err)
		buf := make([]byte, len(want)+4096)
		n, _ := r.ReadAt(buf, 0)
		if st.Size() != int64(len(want)) || fst.Size() != int64(len(want)) || string(got) != want || string(buf[:n]) != want {
			t.Fatalf("%s: stat %d, fstat %d, read %d, held read %d bytes; store has %d", what, st.Size(), fst.Size(), len(got), n, len(want))
		}
	}
	for i := 1; i <= 30; i++ {
		look(fmt.Sprintf("before write %d", i))
		if i%5 == 0 {
			s.send("held", fmt.Sprintf("c%d", i), fmt.Sprintf("message %d", i))
			look(fmt.Sprintf("after send %d", i))
		}
		_, err := w.WriteString(fmt.Sprintf(`{"role":"user","content":"held %d %s"}`+"\n", i, strings.Repeat("y", i*37)))
		testkit.Must(t, err)
		look(fmt.Sprintf("after write %d", i))
	}
}

// TestCacheExactAfterEveryChange: a reader has every file of a session
// and of the index cached; after each kind of change — a send through
// the socket and through ctl, an append through the mount, a value written through the
// mount (state, cwd, meta.json), an index value written, created,
// replaced and removed through the mount — stat sizes and contents are
// exact at once. Values change between versions of the same size (idle
// and done, two session names of one length), which the kernel cannot
// tell apart by size.
func TestCacheExactAfterEveryChange(t *testing.T) {
	s := newFuseServer(t)
	s.send("sa", "a0", "first")
	s.send("sb", "b0", "first")
	dir := sessRel("sa")
	idx := coderRel + "/session/index"
	// The index's values are what the index holds (its store files follow
	// later, at the journal's checkpoint): what this test made them.
	current, byCwd := "sb", "sb"
	files := append(s.sessionFiles(dir),
		watched{idx + "/current", func() string { return current + "\n" }},
		watched{idx + "/by-cwd/" + cwdKey("/"), func() string { return byCwd + "\n" }},
		watched{dir + "/ctl", func() string { return "" }})
	r := cacheReader{s: s}
	// list: its size is its content's, and the session touched last is on top.
	listTop := func(what, want string) {
		t.Helper()
		got := r.look(idx + "/list")[0]
		if got.err != nil || got.size != int64(len(got.data)) || !strings.HasPrefix(got.data, want+"\n") {
			t.Errorf("%s: index/list: stat %d bytes, read %q (%v); want %s on top", what, got.size, got.data, got.err, want)
		}
	}
	hash := idx + "/by-hash/k1"
	for round := 0; round < 5; round++ {
		r.exact("warm", files)
		listTop("warm", map[bool]string{true: "sb", false: "sa"}[round == 0])

		s.send("sa", fmt.Sprintf("a%d", round+1), fmt.Sprintf("round %d", round))
		current, byCwd = "sa", "sa"
		r.exact("after a send through the socket", files)
		listTop("after a send", "sa")

		bash(t, "exec 3<>"+s.mnt(dir+"/ctl")+fmt.Sprintf(`; printf '%%s\n' '{"op":"send","id":"ctl%d","input":"through ctl"}' >&3; cat <&3 > /dev/null`, round))
		r.exact("after a send through ctl", files)
		listTop("after a send through ctl", "sa")

		s.send("sb", fmt.Sprintf("b%d", round+1), "to the other")
		current, byCwd = "sb", "sb"
		r.exact("after a send to the other session", files)
		listTop("after a send to the other session", "sb")
		testkit.Must(t, appendMnt(s.mnt(dir+"/messages.jsonl"), fmt.Sprintf(`{"role":"assistant","content":"appended %d"}`+"\n", round)))
		r.exact("after an append through the mount", files)
		listTop("after an append through the mount", "sa")

		for _, v := range []string{"done\n", "idle\n", "done\n"} { // one size
			writeMnt(t, s.mnt(dir+"/state"), v)
			r.exact("after state := "+strings.TrimSpace(v), files)
		}
		writeMnt(t, s.mnt(dir+"/cwd"), fmt.Sprintf("/w%d\n", round))
		r.exact("after a cwd written through the mount", files)
		writeMnt(t, s.mnt(dir+"/meta.json"), fmt.Sprintf(`{"client":"ctx","scope":"private","name":"n%d"}`, round))
		r.exact("after meta.json written through the mount", files)

		for _, v := range []string{"sa", "sb", "sa"} { // one size
			writeMnt(t, s.mnt(idx+"/current"), v+"\n")
			current = v
			r.exact("after index/current := "+v, files)
		}
		hashValue := "sa"
		withHash := append(files, watched{hash, func() string { return hashValue + "\n" }})
		writeMnt(t, s.mnt(hash), "sa\n")
		r.exact("after index/by-hash/k1 was created", withHash)
		writeMnt(t, s.mnt(hash), "sb\n")
		hashValue = "sb"
		r.exact("after index/by-hash/k1 was replaced", withHash)
		testkit.Must(t, os.Remove(s.mnt(hash)))
		if _, err := os.Stat(s.mnt(hash)); !os.IsNotExist(err) {
			t.Errorf("index/by-hash/k1 after its unlink: %v", err)
		}
	}
}

// cwdKey is the by-cwd key of a cwd (SPEC 9: FNV-1a 64).
func cwdKey(cwd string) string {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(cwd); i++ {
		h ^= uint64(cwd[i])
		h *= 0x100000001b3
	}
	return fmt.Sprintf("cwd-%016x", h)
}

// TestCacheExactSharedSession: in a shared space, uid 1001 has a session's
// files cached; uid 1002 appends to its log through the mount, writes its
// state, and sends to it through the socket; after each, the files are
// exact at once for uid 1001 (and for root, in this process).
func TestCacheExactSharedSession(t *testing.T) {
	s := newFuseServer(t)
	s.spaceAdd("team", 1234)
	first, second := member(1001, 1234), member(1002, 1234)
	extra := `,"scope":"shared","space":"team"`
	s.sendAs(first, "t1", "c1", extra, "hello team")
	dir := "shared/team/agent/coder/session/t1"
	files := s.sessionFiles(dir)
	reader, root := cacheReader{s: s, c: first}, cacheReader{s: s}
	for i := 0; i < 4; i++ {
		reader.exact("warm", files)
		line := fmt.Sprintf(`{"role":"user","content":"from 1002, %d"}`, i)
		if out, err := bashAs(t, second, "printf '%s\\n' '"+line+"' >> "+s.mnt(dir+"/messages.jsonl")); err != nil {
			t.Fatalf("uid 1002 appends: %v %s", err, out)
		}
		root.exact("after uid 1002's append", files)
		reader.exact("after uid 1002's append", files)

		state := []string{"done", "idle"}[i%2]
		if out, err := bashAs(t, second, "echo "+state+" > "+s.mnt(dir+"/state")); err != nil {
			t.Fatalf("uid 1002 writes state: %v %s", err, out)
		}
		root.exact("after uid 1002 wrote state", files)
		reader.exact("after uid 1002 wrote state", files)

		s.sendAs(second, "t1", fmt.Sprintf("c2-%d", i), extra, "from 1002")
		root.exact("after uid 1002's send", files)
		reader.exact("after uid 1002's send", files)
	}
}

// TestCacheExactArchiveAndAnew: a reader has a session's files and the
// session directory's listing cached; the session is archived through the
// socket (ctx) and at once is gone from the listing and from a stat; a
// send then makes a new session of the same name, whose files are exact
// at once, not the old one's from the cache.
func TestCacheExactArchiveAndAnew(t *testing.T) {
	s := newFuseServer(t)
	s.send("temp-x", "x0", "the first life, a long one to tell it apart")
	s.send("other", "o0", "current") // temp-x is not current: it may be archived
	dir := sessRel("temp-x")
	container := s.mnt(coderRel + "/session")
	r := cacheReader{s: s}
	files := s.sessionFiles(dir)
	for i := 0; i < 3; i++ {
		r.exact("warm", files)
		if ls := bash(t, "ls "+container); !strings.Contains(ls, "temp-x\n") {
			t.Fatalf("ls before the archive: %q", ls)
		}
		if out, code := s.ctx(t, "agent", "session", "gc", "coder", "--pattern", "temp-x", "--yes", "--delete"); code != 0 {
			t.Fatalf("ctx gc --delete: %d %s", code, out)
		}
		if ls := bash(t, "ls "+container); strings.Contains(ls, "temp-x\n") {
			t.Errorf("round %d: ls right after the delete still lists temp-x: %q", i, ls)
		}
		if _, err := os.Stat(s.mnt(dir + "/state")); !os.IsNotExist(err) {
			t.Errorf("round %d: stat of state right after the delete: %v", i, err)
		}
		s.send("temp-x", fmt.Sprintf("x%d", i+1), fmt.Sprintf("life %d", i+2))
		r.exact("a session made anew under the old name", files)
		if ls := bash(t, "ls "+container); !strings.Contains(ls, "temp-x\n") {
			t.Errorf("round %d: ls right after the new send: %q", i, ls)
		}
		s.send("other", fmt.Sprintf("o%d", i+1), "current again")
	}
}

// TestCacheExactListing: `ls -l` of the session container (a listing the
// kernel keeps) shows a session made through the socket, and one made
// through the mount, at once; `ls -l` of a session directory shows
// AGENTS.md when a run first writes it.
func TestCacheExactListing(t *testing.T) {
	s := newFuseServer(t)
	s.send("first", "f0", "x")
	container := s.mnt(coderRel + "/session")
	for i := 0; i < 5; i++ {
		bash(t, "ls -l "+container+" > /dev/null")
		name := fmt.Sprintf("sock-%d", i)
		s.send(name, name, "x")
		if ls := bash(t, "ls "+container); !strings.Contains(ls, name+"\n") {
			t.Errorf("ls right after a send made %s: %q", name, ls)
		}
		name = fmt.Sprintf("mkdir-%d", i)
		testkit.Must(t, os.Mkdir(filepath.Join(container, name), 0o700))
		if ls := bash(t, "ls "+container); !strings.Contains(ls, name+"\n") {
			t.Errorf("ls right after mkdir %s: %q", name, ls)
		}
	}
	// index/by-cwd lists what the index holds: a send from a new cwd adds
	// its entry, an archive takes the session's entries away.
	byCwd := s.mnt(coderRel + "/session/index/by-cwd")
	for i := 0; i < 3; i++ {
		bash(t, "ls -l "+byCwd+" > /dev/null")
		cwd := fmt.Sprintf("/w%d", i)
		testkit.Must(t, os.Mkdir(s.mnt(coderRel+"/root"+cwd), 0o755))
		name := fmt.Sprintf("temp-cwd-%d", i)
		s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"cwd":%q,"input":"x"}`, name, name, cwd))
		if ls := bash(t, "ls "+byCwd); !strings.Contains(ls, cwdKey(cwd)+"\n") {
			t.Errorf("ls index/by-cwd right after a send from %s: %q", cwd, ls)
		}
		s.send("first", fmt.Sprintf("f%d", i+1), "current again")
		if out, code := s.ctx(t, "agent", "session", "gc", "coder", "--pattern", name, "--yes", "--delete"); code != 0 {
			t.Fatalf("ctx gc --delete %s: %d %s", name, code, out)
		}
		if ls := bash(t, "ls "+byCwd); strings.Contains(ls, cwdKey(cwd)+"\n") {
			t.Errorf("ls index/by-cwd right after %s was deleted: %q", name, ls)
		}
	}

	s.send("r", "r0", "no rules yet")
	sess := s.mnt(sessRel("r"))
	if ls := bash(t, "ls -l "+sess); strings.Contains(ls, "AGENTS.md") {
		t.Fatalf("a session without rules has AGENTS.md: %q", ls)
	}
	s.define("coder", map[string]string{"AGENTS.md": "be brief\n"})
	s.send("r", "r1", "with rules")
	if ls := bash(t, "ls "+sess); !strings.Contains(ls, "AGENTS.md\n") {
		t.Errorf("ls of a session right after a run first wrote AGENTS.md: %q", ls)
	}
	cacheReader{s: s}.exact("AGENTS.md first written", []watched{{sessRel("r") + "/AGENTS.md", func() string { return "be brief\n" }}})
}

// follower is a program following a log (tail -f, less +F) and what it
// printed so far.
type follower struct {
	mu  sync.Mutex
	out []byte
}

func (f *follower) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out = append(f.out, b...)
	return len(b), nil
}

// printed is what the follower printed so far.
func (f *follower) printed() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(f.out)
}

// shows waits up to a second for want to appear in what was printed.
func (f *follower) shows(t *testing.T, what, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		f.mu.Lock()
		ok := bytes.Contains(f.out, []byte(want))
		f.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s did not show within a second", what)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLessFollows: `less +F` on a terminal shows a line sent through the
// socket, and one appended through the mount, within a second, after it
// had the log cached. (tail -f: TestTailFollows.)
func TestLessFollows(t *testing.T) {
	s := newFuseServer(t)
	s.send("live", "c1", "first")
	log := s.mnt(sessRel("live") + "/messages.jsonl")
	ptm, pts, err := pty.Open()
	testkit.Must(t, err)
	testkit.Must(t, pty.Setsize(ptm, &pty.Winsize{Rows: 40, Cols: 400}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cmd := exec.CommandContext(ctx, "less", "+F", log)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TERM=xterm", "LESSSECURE=1", "HOME=/"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	testkit.Must(t, cmd.Start())
	out := &follower{}
	copied := make(chan struct{})
	go func() { bufio.NewReader(ptm).WriteTo(out); close(copied) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		cancel()
		pts.Close()
		ptm.Close()
		<-copied
	})
	out.shows(t, "less +F: the existing log", `"first"`)
	s.send("live", "c2", "over the socket")
	out.shows(t, "less +F: a line sent over the socket", `"over the socket"`)
	testkit.Must(t, appendMnt(log, `{"role":"user","content":"appended by another writer"}`+"\n"))
	out.shows(t, "less +F: a line appended through the mount", `"appended by another writer"`)
}

// TestTouchToAGivenTime: times set as given through the mount (touch -d,
// cp -p) are the times shown, a time in the past included: a change
// otherwise shows times moved up to its moment (fs's change stamp), which
// must not hide them. A value just written and a log just appended to.
func TestTouchToAGivenTime(t *testing.T) {
	s := newFuseServer(t)
	s.send("touched", "t0", "first")
	for _, file := range []string{"cwd", "messages.jsonl"} {
		p := s.mnt(sessRel("touched") + "/" + file)
		if file == "cwd" {
			testkit.Must(t, os.WriteFile(p, []byte("/srv\n"), 0))
		} else {
			testkit.Must(t, appendMnt(p, `{"role":"user","content":"then touched"}`+"\n"))
		}
		past := time.Unix(1600000000, 0)
		testkit.Must(t, os.Chtimes(p, past, past))
		st, err := os.Stat(p)
		testkit.Must(t, err)
		if !st.ModTime().Equal(past) {
			t.Errorf("%s after a touch to %v: mtime %v", file, past, st.ModTime())
		}
		testkit.Must(t, os.Chtimes(p, time.Time{}, time.Time{})) // the present (UTIME_OMIT both: nothing)
		if st, _ := os.Stat(p); !st.ModTime().Equal(past) {
			t.Errorf("%s after a touch that sets nothing: mtime %v", file, st.ModTime())
		}
	}
}
