package session

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/session/layout"
)

func TestSendRecordsInOrder(t *testing.T) {
	env := newEnv(t)
	frames := env.send(root0, coder(), `{"op":"send","id":"c1","input":"hello"}`)
	if got := types(frames); got != "start,message,usage,done" {
		t.Fatalf("frames %s", got)
	}
	start := frames[0]
	run := start.Str("run")
	if !abi.IsRunID(run) || start.Str("id") != run || start.Str("client_id") != "c1" || start.Str("cwd") != "/" || start.Str("scope") != "private" {
		t.Fatalf("start frame %s", start.Line())
	}
	dir := env.sessDir("home/0", "coder", "default")
	events := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "events.jsonl"))), "\n")
	var evTypes []string
	for _, l := range events {
		var o map[string]any
		testkit.Must(t, json.Unmarshal([]byte(l), &o))
		evTypes = append(evTypes, fmt.Sprint(o["type"]))
		if o["run"] != run {
			t.Fatalf("event without run: %s", l)
		}
	}
	if got := strings.Join(evTypes, ","); got != "start,state,message,usage,done,state" {
		t.Fatalf("events %s", got)
	}
	if events[0] != strings.TrimSuffix(string(start.Line()), "\n") {
		t.Fatalf("recorded start differs from the frame:\n%s\n%s", events[0], start.Line())
	}
	msgs := readFile(t, filepath.Join(dir, "messages.jsonl"))
	if !strings.Contains(msgs, `{"role":"user","run":"`+run+`","content":"hello"`) || !strings.Contains(msgs, `{"role":"assistant","run":"`+run+`"`) {
		t.Fatalf("messages:\n%s", msgs)
	}
	for f, want := range map[string]string{"latest.md": "hello\n", "state": "done\n", "cwd": "/\n", "meta.json": `{"client":"ctx","scope":"private"}` + "\n"} {
		if got := env.stored(filepath.Join(dir, f)); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
	// The index serves its values; the store's files follow at the
	// journal's checkpoint (a clean stop is one).
	x, err := env.e.Index(layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"})
	if err != nil {
		t.Fatal(err)
	}
	if got := x.Current(); got != "default" {
		t.Errorf("current = %q", got)
	}
	if got, err := x.Lookup(abi.IndexByCwd, abi.CwdKey("/")); got != "default" {
		t.Errorf("by-cwd = %q, %v", got, err)
	}
	env.e.Close()
	idx := filepath.Join(env.store, "home/0/agent/coder/session/index")
	if got := readFile(t, filepath.Join(idx, "current")); got != "default\n" {
		t.Errorf("current in the store after a clean stop = %q", got)
	}
	if got := readFile(t, filepath.Join(idx, "by-cwd", abi.CwdKey("/"))); got != "default\n" {
		t.Errorf("by-cwd in the store after a clean stop = %q", got)
	}
}

func TestReplayWritesNothing(t *testing.T) {
	env := newEnv(t)
	first := env.send(root0, coder(), `{"op":"send","id":"c1","input":"hello","cwd":"/"}`)
	before := env.settledTree()
	again := env.send(root0, coder(), `{"op":"send","id":"c1","input":"hello","cwd":"/"}`)
	testkit.Same(t, "a replay", before, testkit.Snapshot(t, env.store, nil))
	if types(again) != "start,done" {
		t.Fatalf("replay frames %s", types(again))
	}
	if string(again[0].Line()) != string(first[0].Line()) || string(again[1].Line()) != string(first[len(first)-1].Line()) {
		t.Fatalf("replay is not the original start and done:\n%s%s", again[0].Line(), again[1].Line())
	}
	// The same client id with the default cwd is the same effective cwd.
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"hello"}`)
	testkit.Same(t, "a replay with the same effective cwd", before, testkit.Snapshot(t, env.store, nil))
}

func TestPayloadReuseIsEINVAL(t *testing.T) {
	env := newEnv(t)
	testkit.Must(t, os.MkdirAll(filepath.Join(env.store, "home/0/agent/coder/root/w"), 0o755))
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"hello"}`)
	before := env.settledTree()
	for _, line := range []string{
		`{"op":"send","id":"c1","input":"other"}`,
		`{"op":"send","id":"c1","input":"hello","cwd":"/w"}`,
		`{"op":"send","id":"c1","input":"hello","scope":"temp"}`, // another session: temp is memory only
	} {
		_, err := env.do(root0, coder(), line)
		if strings.Contains(line, "temp") {
			testkit.Must(t, err) // a temp session is another session: not a reuse
			continue
		}
		testkit.WantErrno(t, line, err, syscall.EINVAL)
	}
	testkit.Same(t, "payload reuse", before, testkit.Snapshot(t, env.store, nil))
}

func TestTempSessionsWriteNothing(t *testing.T) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"c0","input":"x","session":"keep"}`)
	before := env.settledTree()
	frames := env.send(root0, coder(), `{"op":"send","id":"t1","scope":"temp","session":"scratch","input":"hi"}`)
	if types(frames) != "start,message,usage,done" {
		t.Fatalf("temp frames %s", types(frames))
	}
	after := testkit.Snapshot(t, env.store, nil)
	for k := range after {
		if strings.Contains(k, "scratch") {
			t.Fatalf("temp session left %s in the store", k)
		}
	}
	// The chroot root may be made for the cwd check; nothing else.
	for k := range after {
		if _, ok := before[k]; !ok && !strings.Contains(k, "/root") {
			t.Fatalf("temp send added %s", k)
		}
	}
	if got := readFile(t, filepath.Join(env.store, "home/0/agent/coder/session/index/list")); strings.Contains(got, "scratch") {
		t.Fatalf("temp session listed")
	}
	// A replay works within the server's life.
	again := env.send(root0, coder(), `{"op":"send","id":"t1","scope":"temp","session":"scratch","input":"hi"}`)
	if types(again) != "start,done" || again[0].Str("run") != frames[0].Str("run") {
		t.Fatalf("temp replay %s", types(again))
	}
}

func TestCwdResolution(t *testing.T) {
	env := newEnv(t)
	root := filepath.Join(env.store, "home/0/agent/coder/root")
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "workspace/sub"), 0o755))
	testkit.Must(t, os.WriteFile(filepath.Join(root, "file"), nil, 0o644))
	testkit.Must(t, os.Symlink("../../..", filepath.Join(root, "workspace/up")))
	testkit.Must(t, os.Symlink("/etc", filepath.Join(root, "abs")))
	testkit.Must(t, os.Symlink("/proc/self/root", filepath.Join(root, "magic")))
	env.send(root0, coder(), `{"op":"send","id":"ok","input":"x","cwd":"/workspace/sub","session":"s"}`)
	before := env.settledTree()
	cases := map[string]syscall.Errno{
		"/missing":        syscall.ENOENT,
		"/workspace/nope": syscall.ENOENT,
		"/file":           syscall.ENOTDIR,
		"/workspace/up":   syscall.EACCES,
		"/abs":            syscall.EACCES,
		"/magic":          syscall.EACCES,
		root:              syscall.EACCES, // the chroot's own host path
		env.store:         syscall.EACCES,
	}
	i := 0
	for cwd, want := range cases {
		i++
		for _, session := range []string{"s", fmt.Sprintf("new-%d", i)} {
			line := fmt.Sprintf(`{"op":"send","id":"bad-%d","input":"x","cwd":%q,"session":%q}`, i, cwd, session)
			_, err := env.do(root0, coder(), line)
			testkit.WantErrno(t, cwd, err, want)
		}
	}
	testkit.Same(t, "refused cwds", before, testkit.Snapshot(t, env.store, nil))
}

// A first send to an agent whose root/ does not exist yet, refused for
// its cwd (ENOENT below the root, EACCES for a host path it may not
// name) or for the caller's runs (EAGAIN), makes nothing, root/ not
// either; the first that can run makes it.
func TestRefusedFirstSendMakesNoRoot(t *testing.T) {
	env := newEnvLimits(t, quota.LimitConfig{RunsPerUid: 1})
	u := layout.Caller{Uid: 1000, Gid: 1000} // root's runs are not counted
	send := func(cwd string) error {
		_, err := env.do(u, coder(), fmt.Sprintf(`{"op":"send","id":"c","input":"x","cwd":%q}`, cwd))
		return err
	}
	env.do(u, coder(), `{"op":"status"}`) // the uid's home appears at its first look (SPEC 2)
	root := filepath.Join(env.store, "home/1000/agent/coder/root")
	before := env.settledTree()
	testkit.WantErrno(t, "a first send below a root/ not made", send("/missing"), syscall.ENOENT)
	testkit.WantErrno(t, "a first send in the store", send(env.store), syscall.EACCES)
	testkit.Must(t, env.e.limits.Runs.Take(u.Uid)) // the caller's one run, held
	testkit.WantErrno(t, "a first send past the caller's runs", send("/"), syscall.EAGAIN)
	env.e.limits.Runs.Give(u.Uid)
	testkit.Same(t, "refused first sends", before, testkit.Snapshot(t, env.store, nil))
	if _, err := os.Lstat(root); err == nil {
		t.Fatal("a refused send made the agent's root/")
	}
	testkit.Must(t, send("/"))
	if st, err := os.Lstat(root); err != nil || !st.IsDir() {
		t.Fatalf("the first send that ran made no root/: %v", err)
	}
}

func TestListOrderGolden(t *testing.T) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"a","input":"x","session":"review-1"}`)
	env.send(root0, coder(), `{"op":"send","id":"b","input":"x","session":"default"}`)
	x, err := env.e.Index(layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"})
	testkit.Must(t, err)
	if got := string(x.ListBytes()); got != "default\nreview-1\n" {
		t.Fatalf("list %q", got)
	}
	env.send(root0, coder(), `{"op":"send","id":"c","input":"x","session":"review-1"}`)
	if got := string(x.ListBytes()); got != "review-1\ndefault\n" {
		t.Fatalf("list after a send to review-1: %q", got)
	}
	if x.Current() != "review-1" {
		t.Fatalf("current %q", x.Current())
	}
}

func TestSharedScope(t *testing.T) {
	env := newEnv(t)
	_, err := env.do(root0, coder(), `{"op":"send","id":"c","input":"x","scope":"shared","space":"team"}`)
	testkit.WantErrno(t, "missing space", err, syscall.ENOENT)
	testkit.Must(t, env.e.AddSpace("team", 1234, 0o770))
	member := layout.Caller{Uid: 1001, Gid: 1001, Groups: []uint32{1234}}
	stranger := layout.Caller{Uid: 1002, Gid: 1002}
	before := env.settledTree()
	_, err = env.do(stranger, coder(), `{"op":"send","id":"c","input":"x","scope":"shared","space":"team"}`)
	testkit.WantErrno(t, "stranger", err, syscall.EACCES)
	testkit.Same(t, "a refused shared send", before, testkit.Snapshot(t, env.store, nil))
	frames := env.send(member, coder(), `{"op":"send","id":"c","input":"x","scope":"shared","space":"team"}`)
	if types(frames) != "start,message,usage,done" || frames[0].Str("scope") != "shared" {
		t.Fatalf("shared frames %s", types(frames))
	}
	// The store holds the log as root's history in the space's group; the
	// mount shows the group its owner's bits (store.go: layout.ShownStat).
	rel := "shared/team/agent/coder/session/default/messages.jsonl"
	st, err := os.Stat(filepath.Join(env.store, rel))
	testkit.Must(t, err)
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != 0 || sys.Gid != 1234 || st.Mode().Perm() != 0o600 {
		t.Fatalf("shared log stored as %d:%d %v, want 0:1234 0600", sys.Uid, sys.Gid, st.Mode())
	}
	shown, err := env.e.Stat(rel)
	testkit.Must(t, err)
	if shown.Gid != 1234 || shown.Mode&0o777 != 0o660 {
		t.Fatalf("shared log shown as %d:%d %o, want group 1234 and 0660", shown.Uid, shown.Gid, shown.Mode&0o777)
	}
}

// TestPrivateOwnership: a home's history is root's in the store, 0700 and
// 0600, and shown as its uid's; its free trees are the uid's.
func TestPrivateOwnership(t *testing.T) {
	env := newEnv(t)
	u := layout.Caller{Uid: 1001, Gid: 1001}
	env.send(u, coder(), `{"op":"send","id":"c","input":"x"}`)
	for _, p := range []string{"home/1001", "home/1001/agent/coder/session/default", "home/1001/agent/coder/session/default/state",
		"home/1001/agent/coder/session/default/context", "home/1001/agent/coder/root"} {
		st, err := os.Stat(filepath.Join(env.store, p))
		testkit.Must(t, err)
		sys := st.Sys().(*syscall.Stat_t)
		want := os.FileMode(0o600)
		if st.IsDir() {
			want = 0o700
		}
		stored := uint32(0)
		if strings.HasSuffix(p, "/context") || strings.HasSuffix(p, "/root") {
			stored = 1001
		}
		if sys.Uid != stored || st.Mode().Perm() != want {
			t.Errorf("%s: stored as uid %d mode %v, want %d and %v", p, sys.Uid, st.Mode(), stored, want)
		}
		shown, err := env.e.Stat(p)
		testkit.Must(t, err)
		if shown.Uid != 1001 || os.FileMode(shown.Mode).Perm() != want {
			t.Errorf("%s: shown as uid %d mode %o, want 1001 and %v", p, shown.Uid, shown.Mode&0o777, want)
		}
	}
}

func TestUnknownAgentIsENOENT(t *testing.T) {
	env := newEnv(t)
	before := env.settledTree()
	_, err := env.do(root0, Target{Kind: abi.KindAgent, Owner: "ghost"}, `{"op":"send","id":"c","input":"x"}`)
	testkit.WantErrno(t, "undefined agent", err, syscall.ENOENT)
	after := testkit.Snapshot(t, env.store, nil)
	for k := range after {
		if strings.Contains(k, "ghost") {
			t.Fatalf("a send to an undefined agent wrote %s", k)
		}
	}
	_ = before
}

// A send whose user message line would be over the line limit (its input
// fits in a request, its escaped line does not) is refused with EINVAL and
// writes nothing: not its start, not its state; a retry with the same
// client id is refused the same way and writes nothing either. To a
// session that does not exist yet, it creates none (issue 20, item 9):
// no directory, no seal, no index entry.
func TestRefusedSendWritesNothing(t *testing.T) {
	for _, session := range []string{"default", "fresh"} {
		t.Run(session, func(t *testing.T) {
			env := newEnv(t)
			env.send(root0, coder(), `{"op":"send","id":"c0","input":"first"}`)
			before := env.settledTree()
			// A request of exactly the request limit: its user message
			// line, with the run id and time stamp, is longer than the
			// line limit.
			skeleton := `{"op":"send","id":"big","session":"` + session + `","input":""}`
			line := `{"op":"send","id":"big","session":"` + session + `","input":"` + strings.Repeat("x", abi.MaxRequestBytes-len(skeleton)) + `"}`
			if len(line) != abi.MaxRequestBytes {
				t.Fatalf("request of %d bytes", len(line))
			}
			for i := 0; i < 2; i++ {
				_, err := env.do(root0, coder(), line)
				testkit.WantErrno(t, "a send whose user line is over the limit", err, syscall.EINVAL)
				testkit.Same(t, "a refused send", before, env.settledTree())
			}
		})
	}
}

// A run that streams more text than one line may hold, and no message, is
// recorded as several assistant messages, in order, each within the limit;
// it ends ok, and its text is all there.
func TestLongDeltaTextIsSplit(t *testing.T) {
	env := newEnv(t)
	chunk := strings.Repeat("d", 1000)
	env.define("streamer", map[string]string{"abi": "jsonl",
		"program": "#!/bin/sh\nfor i in $(seq 1500); do printf '{\"type\":\"delta\",\"text\":\"" + chunk + "\"}\\n'; done\n"})
	streamer, send := Target{Kind: abi.KindAgent, Owner: "streamer"}, `{"op":"send","id":"s1","input":"go"}`
	frames := env.send(root0, streamer, send)
	// The run streams more than a reader may fall behind (reply's bound):
	// a reader the load kept from keeping up is cut with EAGAIN and sends
	// again with the same id, as a client does, until the run's record
	// answers it whole.
	for try := 0; try < 100 && followCut(frames); try++ {
		t.Logf("cut behind the run, sending again: %s", frames[len(frames)-1].Line())
		time.Sleep(50 * time.Millisecond)
		frames = env.send(root0, streamer, send)
	}
	if last := frames[len(frames)-1]; last.Str("type") != "done" || last.Str("status") != "ok" {
		t.Fatalf("last frame %s", last.Line())
	}
	msgs := readFile(t, filepath.Join(env.sessDir("home/0", "streamer", "default"), "messages.jsonl"))
	var text strings.Builder
	n := 0
	for _, l := range strings.Split(strings.TrimSuffix(msgs, "\n"), "\n") {
		if len(l) > abi.MaxLineBytes {
			t.Fatalf("a line of %d bytes", len(l))
		}
		o, err := proto.ParseObject([]byte(l), false)
		testkit.Must(t, err)
		if o.Str("role") == "assistant" {
			n++
			text.WriteString(proto.MessageOf(o).Text())
		}
	}
	if n < 2 || text.String() != strings.Repeat(chunk, 1500) {
		t.Fatalf("%d assistant messages holding %d bytes, want several holding %d", n, text.Len(), 1500*len(chunk))
	}
	if st := env.stored(filepath.Join(env.sessDir("home/0", "streamer", "default"), "state")); st != "done\n" {
		t.Fatalf("state %q", st)
	}
}

// followCut reports whether a reply ended with the EAGAIN of a reader
// that fell too far behind its run.
func followCut(frames []*proto.Object) bool {
	last := frames[len(frames)-1]
	return last.Str("type") == proto.FrameError && last.Str("code") == "EAGAIN" && strings.HasPrefix(last.Str("message"), "follow:")
}

// With a small bound on loaded sessions, sends to many sessions keep
// working, the sessions nobody uses are closed (their descriptors with
// them), and a session dropped from the cache loads again as it was.
func TestSessionCacheIsBounded(t *testing.T) {
	base := t.TempDir()
	env := &testEnv{t: t, store: filepath.Join(base, "store"), root: filepath.Join(base, "root")}
	env.define("coder", map[string]string{"model": "debug/echo"})
	e, err := Open(Config{Store: env.store, Root: env.root, MaxSessions: 4})
	testkit.Must(t, err)
	env.e = e
	t.Cleanup(func() { e.Close() })
	fds := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		return len(ents)
	}
	env.send(root0, coder(), `{"op":"send","id":"w","input":"warm up","session":"s0"}`)
	start := fds()
	for i := 0; i < 60; i++ {
		env.send(root0, coder(), fmt.Sprintf(`{"op":"send","id":"c%d","input":"hi %d","session":"s%d"}`, i, i, i))
	}
	if n := e.sessions.Len(); n > 4 {
		t.Fatalf("%d sessions loaded, bound 4", n)
	}
	if grown := fds() - start; grown > 4*quota.FDsPerSession {
		t.Fatalf("descriptors grew by %d over 60 sessions, bound %d", grown, 4*quota.FDsPerSession)
	}
	// s0 was dropped long ago: a replay of its first send still answers
	// from its recorded history.
	again := env.send(root0, coder(), `{"op":"send","id":"w","input":"warm up","session":"s0"}`)
	if types(again) != "start,done" {
		t.Fatalf("replay after the session was dropped: %s", types(again))
	}
}

// An empty input is refused (EINVAL) before anything is written, by any
// client: a new session is not created, an existing one is not changed.
func TestEmptyInputIsRefused(t *testing.T) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"c0","input":"first"}`) // the home exists
	before := env.settledTree()
	_, err := env.do(root0, coder(), `{"op":"send","id":"e0","input":"","session":"new"}`)
	testkit.WantErrno(t, "an empty input to a new session", err, syscall.EINVAL)
	testkit.Same(t, "a refused empty send to a new session", before, testkit.Snapshot(t, env.store, nil))
	_, err = env.do(root0, coder(), `{"op":"send","id":"e1","input":""}`)
	testkit.WantErrno(t, "an empty input to a session", err, syscall.EINVAL)
	testkit.Same(t, "a refused empty send", before, testkit.Snapshot(t, env.store, nil))
}
