package session

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/fsck"

	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/search"
	"github.com/ctxfs/ctxfs/session/layout"
)

// found runs a search and returns its matches as "session role text"
// lines, sorted, and its last frame (searched).
func (env *testEnv) found(c layout.Caller, line string) ([]string, *proto.Object) {
	env.t.Helper()
	frames, err := env.do(c, coder(), line)
	if err != nil {
		env.t.Fatalf("%s: %v", line, err)
	}
	if len(frames) == 0 || frames[len(frames)-1].Str("type") != proto.FrameSearched {
		env.t.Fatalf("%s: frames %s", line, types(frames))
	}
	var out []string
	for _, f := range frames[:len(frames)-1] {
		if f.Str("type") != proto.FrameMatch {
			env.t.Fatalf("%s: frame %s", line, f.Line())
		}
		out = append(out, f.Str("session")+" "+f.Str("role")+" "+f.Str("text"))
	}
	sort.Strings(out)
	return out, frames[len(frames)-1]
}

func searchLine(q string, extra ...string) string {
	o := proto.NewObject("op", "search", "query", q)
	for i := 0; i+1 < len(extra); i += 2 {
		o.Set(extra[i], extra[i+1])
	}
	return strings.TrimSuffix(string(o.Line()), "\n")
}

func (env *testEnv) sendTo(c layout.Caller, session, input string) {
	env.t.Helper()
	o := proto.NewObject("op", "send", "id", fmt.Sprintf("c%d", rand.Int64()), "session", session, "input", input)
	env.send(c, coder(), strings.TrimSuffix(string(o.Line()), "\n"))
}

func wantFound(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\ngot  %q\nwant %q", what, got, want)
	}
}

func TestSearchAnyScript(t *testing.T) {
	env := newEnv(t)
	env.sendTo(root0, "s1", "我们今天讨论文件系统")
	env.sendTo(root0, "s2", "文件很大, Hello World")
	env.sendTo(root0, "s3", "これはファイルシステムです 🚀🔥")
	// debug/echo answers with the input: each message is found twice.
	both := func(s, text string) []string { return []string{s + " user " + text, s + " assistant " + text} }
	got, end := env.found(root0, searchLine("文件"))
	wantFound(t, "文件", got, append(both("s1", "我们今天讨论文件系统"), both("s2", "文件很大, Hello World")...)...)
	if end.Str("type") != "searched" || string(end.Raw("matches")) != "4" || string(end.Raw("sessions")) != "3" || string(end.Raw("truncated")) != "false" {
		t.Fatalf("end frame %s", end.Line())
	}
	got, _ = env.found(root0, searchLine("系统"))
	wantFound(t, "a two-rune query", got, both("s1", "我们今天讨论文件系统")...)
	got, _ = env.found(root0, searchLine("论"))
	wantFound(t, "a one-rune query", got, both("s1", "我们今天讨论文件系统")...)
	got, _ = env.found(root0, searchLine("hello WORLD"))
	wantFound(t, "case", got, both("s2", "文件很大, Hello World")...)
	got, _ = env.found(root0, searchLine("ファイル"))
	wantFound(t, "Japanese", got, both("s3", "これはファイルシステムです 🚀🔥")...)
	got, _ = env.found(root0, searchLine("🔥"))
	wantFound(t, "emoji", got, both("s3", "これはファイルシステムです 🚀🔥")...)
	got, _ = env.found(root0, searchLine("文档"))
	wantFound(t, "no match", got)
	got, _ = env.found(root0, searchLine("文件", "session", "s2"))
	wantFound(t, "one session", got, both("s2", "文件很大, Hello World")...)
	_, err := env.do(root0, coder(), searchLine("文件", "session", "nope"))
	testkit.WantErrno(t, "a missing session", err, syscall.ENOENT)
	frames, err := env.do(root0, coder(), searchLine("文件"))
	if err != nil || frames[0].Str("run") == "" || frames[0].Str("ts") == "" {
		t.Fatalf("match frame %v %v", frames, err)
	}
}

func TestSearchOnlyCallersHome(t *testing.T) {
	env := newEnv(t)
	env.sendTo(root0, "s1", "root's secret 秘密")
	u := layout.Caller{Uid: 1001, Gid: 1001}
	env.sendTo(u, "s1", "the user's own 秘密")
	got, _ := env.found(u, searchLine("秘密"))
	wantFound(t, "uid 1001", got, "s1 user the user's own 秘密", "s1 assistant the user's own 秘密")
	testkit.Must(t, env.e.AddSpace("team", 1234, 0o770))
	member := layout.Caller{Uid: 1002, Gid: 1002, Groups: []uint32{1234}}
	env.send(member, coder(), `{"op":"send","id":"t1","input":"shared 秘密","scope":"shared","space":"team"}`)
	got, _ = env.found(member, searchLine("秘密", "scope", "shared", "space", "team"))
	wantFound(t, "member", got, "default user shared 秘密", "default assistant shared 秘密")
	_, err := env.do(u, coder(), searchLine("秘密", "scope", "shared", "space", "team"))
	testkit.WantErrno(t, "a stranger in the space", err, syscall.EACCES)
}

func TestSearchFollowsAppends(t *testing.T) {
	env := newEnv(t)
	env.sendTo(root0, "s1", "first words")
	got, _ := env.found(root0, searchLine("文件"))
	wantFound(t, "before", got)
	seg := filepath.Join(env.store, "home/0/.search/agent/coder/s1/0")
	st, err := os.Stat(seg)
	testkit.Must(t, err)
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("segment %v owned by %d", st.Mode(), sys.Uid)
	}
	before := readFile(t, seg)
	ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: "agent", Owner: "coder"}, Name: "s1"}
	testkit.Must(t, env.e.AppendLog(root0, ref, "messages.jsonl", []byte(`{"role":"user","content":"appended 文件"}`+"\n")))
	got, _ = env.found(root0, searchLine("文件"))
	wantFound(t, "after an append", got, "s1 user appended 文件")
	if readFile(t, seg) == before {
		t.Fatal("the segment was not brought up to date")
	}
	// A tool message and a line that is not a message are not searched.
	testkit.Must(t, env.e.AppendLog(root0, ref, "messages.jsonl", []byte(`{"role":"tool","content":[{"type":"tool_result","content":"文件"}]}`+"\n"+`{"note":"文件"}`+"\n")))
	got, _ = env.found(root0, searchLine("文件"))
	wantFound(t, "tool messages", got, "s1 user appended 文件")
}

// TestSearchRebuilds: the index deleted, damaged, or belonging to an older
// session of the same name is rebuilt, with the same answers.
func TestSearchRebuilds(t *testing.T) {
	env := newEnv(t)
	env.sendTo(root0, "s1", "我们今天讨论文件系统")
	env.sendTo(root0, "s2", "文件")
	want, _ := env.found(root0, searchLine("文件"))
	idx := filepath.Join(env.store, "home/0/.search")
	testkit.Must(t, os.RemoveAll(idx))
	got, _ := env.found(root0, searchLine("文件"))
	wantFound(t, "after deleting the index", got, want...)
	seg := filepath.Join(idx, "agent/coder/s1/0")
	b := []byte(readFile(t, seg))
	for _, damage := range []func([]byte) []byte{
		func(b []byte) []byte { c := bytes.Clone(b); c[70] ^= 0xff; return c }, // the bits: all may be cleared
		func(b []byte) []byte { c := bytes.Clone(b); c[30] ^= 0xff; return c }, // the header
		func(b []byte) []byte { return b[:100] },
		func(b []byte) []byte { return nil },
	} {
		testkit.Must(t, os.WriteFile(seg, damage(b), 0o600))
		got, _ := env.found(root0, searchLine("文件"))
		wantFound(t, "after damage", got, want...)
		if readFile(t, seg) != string(b) {
			t.Fatal("the damaged segment was not rebuilt as it was")
		}
	}
	// Segments of an older session of the same name (another identity).
	testkit.Must(t, env.e.Close())
	testkit.Must(t, os.RemoveAll(env.sessDir("home/0", "coder", "s2")))
	env.open()
	env.sendTo(root0, "s2", "新的")
	got, _ = env.found(root0, searchLine("文件"))
	wantFound(t, "a session replaced", got, want[0], want[1])
	// A leftover of a session gone goes.
	testkit.Must(t, os.MkdirAll(filepath.Join(idx, "agent/coder/gone"), 0o700))
	env.found(root0, searchLine("x"))
	if _, err := os.Stat(filepath.Join(idx, "agent/coder/gone")); !os.IsNotExist(err) {
		t.Fatalf("the index of a session gone stays: %v", err)
	}
}

func TestSearchBound(t *testing.T) {
	env := newEnv(t)
	env.sendTo(root0, "s1", "start")
	var lines bytes.Buffer
	for i := range search.MaxMatches + 10 {
		fmt.Fprintf(&lines, `{"role":"user","content":"needle %d"}`+"\n", i)
	}
	ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: "agent", Owner: "coder"}, Name: "s1"}
	testkit.Must(t, env.e.AppendLog(root0, ref, "messages.jsonl", lines.Bytes()))
	got, end := env.found(root0, searchLine("NEEDLE"))
	if len(got) != search.MaxMatches || string(end.Raw("truncated")) != "true" || end.Str("limit") != "matches" || string(end.Raw("matches")) != "1000" {
		t.Fatalf("%d matches, end %s", len(got), end.Line())
	}
}

// TestSearchLargeSession: a session whose index has many segments, built
// in steps between appends, answers as a plain scan does, and its segments
// are those a build from scratch makes.
func TestSearchLargeSession(t *testing.T) {
	env := newEnv(t)
	env.sendTo(root0, "big", "start")
	ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: "agent", Owner: "coder"}, Name: "big"}
	rng := rand.New(rand.NewPCG(5, 6))
	var texts []string
	for step := range 6 {
		var lines bytes.Buffer
		for range 1500 {
			t := randomCJK(rng, 1+rng.IntN(100))
			texts = append(texts, t)
			o := proto.NewObject("role", "user", "run", "r", "content", t)
			lines.Write(o.Line())
		}
		testkit.Must(t, env.e.AppendLog(root0, ref, "messages.jsonl", lines.Bytes()))
		if step%2 == 0 {
			env.found(root0, searchLine("x"))
		}
	}
	for range 50 {
		q := []rune(texts[rng.IntN(len(texts))])
		i := rng.IntN(len(q))
		query := string(q[i:min(len(q), i+1+rng.IntN(4))])
		got, _ := env.found(root0, searchLine(query))
		if want := scanAll(texts, query); len(got) != want {
			t.Fatalf("query %q: %d matches, a scan finds %d", query, len(got), want)
		}
	}
	dir := filepath.Join(env.store, "home/0/.search/agent/coder/big")
	stepped := snapshotDir(t, dir)
	if len(stepped) < 3 {
		t.Fatalf("%d segments", len(stepped))
	}
	testkit.Must(t, os.RemoveAll(dir))
	env.found(root0, searchLine("x"))
	if fresh := snapshotDir(t, dir); fmt.Sprint(fresh) != fmt.Sprint(stepped) {
		t.Fatal("segments built in steps differ from segments built at once")
	}
}

func randomCJK(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteRune(rune(0x4E00 + rng.IntN(3000)))
	}
	return b.String()
}

// scanAll counts the texts that hold q.
func scanAll(texts []string, q string) int {
	n := 0
	query := search.NewQuery(q)
	for _, t := range texts {
		if _, _, ok := query.Find(t); ok {
			n++
		}
	}
	return n
}

func snapshotDir(t *testing.T, dir string) map[string]string {
	ents, err := os.ReadDir(dir)
	testkit.Must(t, err)
	out := map[string]string{}
	for _, e := range ents {
		out[e.Name()] = readFile(t, filepath.Join(dir, e.Name()))
	}
	return out
}

// TestSearchIndexShape: fsck accepts the index and whatever it leaves
// (a leftover of a replace), and names only what is not a directory or a
// regular file there.
func TestSearchIndexShape(t *testing.T) {
	env := newEnv(t)
	env.sendTo(root0, "s1", "hello")
	env.found(root0, searchLine("hello"))
	var probs []string
	check := func() {
		_, err := fsck.Check(env.store, false, true, fsck.Report{Problem: func(path, what string) { probs = append(probs, path+": "+what) }})
		testkit.Must(t, err)
	}
	if check(); len(probs) != 0 {
		t.Fatalf("a clean store with an index: %q", probs)
	}
	idx := filepath.Join(env.store, "home/0/.search/agent/coder/s1")
	testkit.Must(t, os.WriteFile(filepath.Join(idx, ".1.tmp-0123456789abcdef"), nil, 0o644))
	testkit.Must(t, os.Symlink("/etc/passwd", filepath.Join(idx, "1")))
	check()
	if len(probs) != 1 || !strings.Contains(probs[0], ".search/agent/coder/s1/1: a symlink, not a regular file") {
		t.Fatalf("problems %q", probs)
	}
	// The search itself clears what does not belong, and answers.
	if got, _ := env.found(root0, searchLine("hello")); len(got) != 2 {
		t.Fatalf("found %q", got)
	}
	if _, err := os.Lstat(filepath.Join(idx, "1")); !os.IsNotExist(err) {
		t.Fatalf("the planted link stays: %v", err)
	}
}
