package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Issue 19, finding 9: one uid's parallel searches of a large session
// took the CPU other users' sends needed. A uid has at most 2 searches
// under way (EAGAIN beyond), at most half the CPUs scan at once, a search
// reads at most so many bytes (the reply says it was cut), and a search
// whose client hung up stops.

// searchFiller holds every rune and 3-gram of "zebrafish" but never the
// word: every segment of the index is a candidate for it, and every line
// must be verified (what made each search of the issue cost seconds).
const searchFiller = "zebra rafi fish and a zebra's afish, "

// wantZebrafish is what a whole search for "zebrafish" of a session
// bigSessionAs made finds.
func wantZebrafish(session string) []string {
	return []string{session + " user the first zebrafish", session + " user the last zebrafish"}
}

// bigSessionAs makes session name of c's coder with about mib MiB of
// messages (sessionOfLines): filler, with "the first zebrafish" first and
// "the last zebrafish" last.
func bigSessionAs(t testing.TB, s *server, c *cred, name string, mib int) {
	t.Helper()
	sessionOfLines(t, s, c, name, func(w io.Writer) {
		fmt.Fprintln(w, `{"role":"user","content":"the first zebrafish"}`)
		filler := fmt.Sprintf(`{"role":"user","content":%q}`, strings.Repeat(searchFiller, 40))
		for n := 0; n < mib<<20; n += len(filler) + 1 {
			fmt.Fprintln(w, filler)
		}
		fmt.Fprintln(w, `{"role":"assistant","content":"not a match: zebra fish"}`)
		fmt.Fprintln(w, `{"role":"user","content":"the last zebrafish"}`)
	})
}

// sessionOfLines makes session name of c's coder (by a send), then
// appends the lines write writes to its messages.jsonl through the mount
// as c (cat, in its own writes of 128 KiB), as a user would.
func sessionOfLines(t testing.TB, s *server, c *cred, name string, write func(w io.Writer)) {
	t.Helper()
	s.sendAs(c, name, "mk-"+name, "", "start")
	dir := t.TempDir()
	os.Chmod(dir, 0o755) // c reads the file
	src := filepath.Join(dir, "lines.jsonl")
	f, err := os.Create(src)
	testkit.Must(t, err)
	w := bufio.NewWriterSize(f, 1<<20)
	write(w)
	testkit.Must(t, w.Flush())
	testkit.Must(t, f.Close())
	os.Chmod(src, 0o644)
	log := s.mnt(fmt.Sprintf("home/%d/agent/coder/session/%s/messages.jsonl", c.uid, name))
	if out, err := runCmd(t, c, nil, "/bin/bash", "-c", `cat "$0" >> "$1"`, src, log); err != nil {
		t.Fatalf("appending to %s as %s: %v %s", name, credName(c), err, out)
	}
}

// repeatLine writes line n times (sessionOfLines).
func repeatLine(line string, n int) func(w io.Writer) {
	return func(w io.Writer) {
		for range n {
			io.WriteString(w, line)
		}
	}
}

// searchResult is one search's outcome as a test judges it: the matches
// found ("session role text", sorted, run ids left out) or the errno of a
// refusal.
type searchResult struct {
	via     string // "ctx" or "socket"
	matches []string
	errno   string // "" when it answered
	bad     string // anything else: what went wrong
}

// ctxSearchAs runs `ctx agent search coder ARGS…` as c.
func ctxSearchAs(t testing.TB, s *server, c *cred, args ...string) searchResult {
	r := searchResult{via: "ctx"}
	out, errs, code := ctxSplitAs(t, s, c, append([]string{"agent", "search", "coder"}, args...)...)
	switch {
	case code == 2 && strings.HasPrefix(errs, "ctx: search: EAGAIN"):
		r.errno = "EAGAIN"
	case (code == 0 || code == 2) && strings.HasPrefix(errs, "ctx: search: EFBIG"):
		r.errno = "EFBIG" // cut at the scan bound: exit 0 when it found something
	}
	if code == 0 || code == 1 {
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if f := strings.Split(l, "\t"); len(f) == 4 {
				r.matches = append(r.matches, f[0]+" "+f[2]+" "+f[3])
			}
		}
	}
	if r.errno == "" && (code > 1 || errs != "") {
		r.bad = fmt.Sprintf("exit %d, stderr %q", code, errs)
	}
	return r
}

// socketSearchAs sends op search on the coder socket as c.
func socketSearchAs(s *server, c *cred, query string) searchResult {
	r := searchResult{via: "socket"}
	frames, raw, err := s.requestAs(c, "coder", fmt.Sprintf(`{"op":"search","query":%q}`, query))
	switch {
	case err != nil || len(frames) == 0:
		r.bad = fmt.Sprintf("%v %q", err, raw)
	case len(frames) == 1 && frames[0]["type"] == "error":
		r.errno = errorCode(frames)
	case frames[len(frames)-1]["type"] != "searched" || frames[len(frames)-1]["truncated"] != false:
		r.bad = "reply " + raw
	default:
		for _, f := range frames[:len(frames)-1] {
			r.matches = append(r.matches, fmt.Sprint(f["session"], " ", f["role"], " ", f["text"]))
		}
	}
	return r
}

// TestSearchParallelPerUid: 32 searches at once by uid 1001 of its 48 MiB
// session, half through ctx and half on the socket: those past the uid's
// 2 under way are refused EAGAIN (ctx: exit 2 and the errno; the socket:
// an error frame) and write nothing; the rest find exactly the two
// matches. Meanwhile uid 1002's sends all complete.
func TestSearchParallelPerUid(t *testing.T) {
	s := newFuseServerWith(t, func(s *server) { s.env = append(s.env, "CTXFS_LIMITS=searches=2") })
	u, other := &cred{uid: 1001, gid: 1001}, &cred{uid: 1002, gid: 1002}
	bigSessionAs(t, s, u, "big", 48)
	first := ctxSearchAs(t, s, u, "zebrafish") // builds the index, alone
	sameLines(t, "the first search", first.matches, wantZebrafish("big")...)
	logs := s.sessionDir(1001, "coder", "big")
	before := hostSnapshot(t, logs)

	stop := make(chan struct{})
	sends := make(chan error, 1)
	go func() { sends <- sendsUntil(s, other, stop) }()
	results := make([]searchResult, 32)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			if i%2 == 0 {
				results[i] = ctxSearchAs(t, s, u, "zebrafish")
			} else {
				results[i] = socketSearchAs(s, u, "zebrafish")
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-sends; err != nil {
		t.Errorf("uid 1002's sends during the searches: %v", err)
	}

	refused := map[string]int{}
	answered := 0
	for i, r := range results {
		switch {
		case r.bad != "":
			t.Errorf("search %d (%s): %s", i, r.via, r.bad)
		case r.errno == "EAGAIN":
			refused[r.via]++
		case r.errno != "":
			t.Errorf("search %d (%s): refused %s, want EAGAIN", i, r.via, r.errno)
		default:
			answered++
			sameLines(t, fmt.Sprintf("search %d (%s)", i, r.via), r.matches, wantZebrafish("big")...)
		}
	}
	// 32 searches of 48 MiB each started together, and a uid may have 2
	// under way: most are refused, through both ways in.
	if answered < 1 || refused["ctx"] < 1 || refused["socket"] < 1 || answered+refused["ctx"]+refused["socket"] != 32 {
		t.Fatalf("32 parallel searches: %d answered, refused %v", answered, refused)
	}
	t.Logf("32 parallel searches: %d answered, refused EAGAIN %v", answered, refused)
	if diffs, _ := hostDiffs(before, hostSnapshot(t, logs)); len(diffs) > 0 {
		t.Fatalf("the searches changed the session: %v", diffs)
	}
}

// sendsUntil sends as c to its session "s" one send after the other until
// stop is closed (at least one); the first failure ends it.
func sendsUntil(s *server, c *cred, stop <-chan struct{}) error {
	for i := 0; ; i++ {
		frames, raw, err := s.requestAs(c, "coder", fmt.Sprintf(`{"op":"send","id":"n%d","session":"s","input":"hello %d"}`, i, i))
		if err != nil || len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
			return fmt.Errorf("send %d: %v %q", i, err, raw)
		}
		select {
		case <-stop:
			return nil
		default:
		}
	}
}

// TestSearchScanBoundSaysSo: a search that reaches the server's bound on
// the bytes one search may read (here 1 MiB of a 3 MiB session) is cut,
// and says so: the socket's searched frame has truncated true and limit
// "scan"; ctx prints EFBIG and exits 2 when it found nothing (it cannot
// say "not found"). Another session within the bound is searched whole.
func TestSearchScanBoundSaysSo(t *testing.T) {
	s := newFuseServerWith(t, func(s *server) { s.env = append(s.env, "CTXFS_LIMITS=search_scan=1048576") })
	u := &cred{uid: 1001, gid: 1001}
	bigSessionAs(t, s, u, "big", 3)
	frames, raw, err := s.requestAs(u, "coder", `{"op":"search","query":"zebrafish"}`)
	if err != nil || len(frames) == 0 {
		t.Fatalf("search: %v %q", err, raw)
	}
	end := frames[len(frames)-1]
	if end["type"] != "searched" || end["truncated"] != true || end["limit"] != "scan" || end["scanned"].(float64) > 1<<20 {
		t.Fatalf("a search past the scan bound: %q", raw)
	}
	r := ctxSearchAs(t, s, u, "zebrafish")
	if r.errno != "EFBIG" || len(r.matches) != 0 {
		t.Fatalf("ctx, cut before a match: %+v", r)
	}
	// A session within the bound, searched alone, is answered whole.
	s.sendAs(u, "small", "m1", "", "a zebrafish in a small session")
	out, errs, code := ctxSplitAs(t, s, u, "agent", "search", "coder", "zebrafish", "--session", "small")
	if code != 0 || errs != "" || strings.Count(out, "\n") != 2 {
		t.Fatalf("a small session: exit %d %q %q", code, out, errs)
	}
}

// TestSearchHangUpStops: a second search of a uid with searches=1 is
// refused EAGAIN through ctx and a ctl file; a search whose client hangs
// up stops scanning at once: once its place among the uid's searches is back, its session's
// index grows no more, far from built (a search that went on would build
// it whole, 64 segments, in about two seconds).
func TestSearchHangUpStops(t *testing.T) {
	s := newFuseServerWith(t, func(s *server) { s.env = append(s.env, "CTXFS_LIMITS=searches=1") })
	u := &cred{uid: 1001, gid: 1001}
	bigSessionAs(t, s, u, "big", 64)
	s.sendAs(u, "small", "m1", "", "a zebrafish in a small session")
	index := filepath.Join(s.store, "home/1001/.search/agent/coder/big")
	segments := func() int { ents, _ := os.ReadDir(index); return len(ents) }

	// The client sends its request, and closes when told (a line on stdin).
	client := exec.Command("/usr/bin/python3", "-c", `
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b'{"op":"search","query":"zebrafish","session":"big"}\n')
sys.stdin.readline()
s.close()
`, s.root+"/agent/coder.sock")
	client.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid}}
	stdin, err := client.StdinPipe()
	testkit.Must(t, err)
	testkit.Must(t, client.Start())
	t.Cleanup(func() { client.Process.Kill(); client.Wait() })
	eventually(t, 20*time.Second, "the search building the index", func() bool { return segments() > 0 })
	if r := ctxSearchAs(t, s, u, "zebrafish", "--session", "small"); r.errno != "EAGAIN" {
		t.Fatalf("a second search with searches=1: %+v", r)
	}
	// Through a ctl file the write of the request fails EAGAIN, and the
	// refusal frame is what a read then gets.
	ctl := s.mnt("home/1001/agent/coder/session/small/ctl")
	out, err := runCmd(t, u, nil, "/bin/bash", "-c", `exec 3<>"$0" && printf '%s\n' '{"op":"search","query":"zebrafish"}' >&3; echo "status $?"; cat <&3`, ctl)
	if err != nil || !strings.Contains(out, "Resource temporarily unavailable") || !strings.Contains(out, "status 1") || !strings.Contains(out, `"code":"EAGAIN"`) {
		t.Fatalf("a second search through ctl: %v %q", err, out)
	}
	stdin.Close()
	testkit.Must(t, client.Wait())

	eventually(t, 20*time.Second, "uid 1001's place among searches back", func() bool {
		return ctxSearchAs(t, s, u, "zebrafish", "--session", "small").errno != "EAGAIN"
	})
	built := segments()
	time.Sleep(time.Second)
	if now := segments(); now != built || now >= 64 {
		t.Fatalf("the abandoned search went on: %d segments of the index when its place came back, %d a second later", built, now)
	}
}

// TestLongQueryScansInLinearTime: a plain ASCII query was looked for by
// its rarest byte, the whole query compared at each place that byte is;
// a query of 1 KiB ("q"×1023 "e") in lines of "q"s compared 1 KiB at
// every byte: 1.7 s of the server's CPU per MiB of log, a scan slot held
// that long between two of its 5 ms turns (other users' searches
// waited), so a search of 12 MiB took over 20 s. Now the search falls
// back to a linear one once the comparisons outgrow the bytes.
func TestLongQueryScansInLinearTime(t *testing.T) {
	s := newFuseServer(t)
	u := &cred{uid: 1001, gid: 1001}
	sessionOfLines(t, s, u, "qs", repeatLine(`{"role":"user","content":"qqe `+strings.Repeat("q", 1000000)+`"}`+"\n", 12))
	query := strings.Repeat("q", 1023) + "e"
	start := time.Now()
	frames, raw, err := s.requestAsWithin(u, "coder", fmt.Sprintf(`{"op":"search","query":%q}`, query), 2*time.Minute)
	took := time.Since(start)
	if err != nil || len(frames) != 1 || frames[0]["type"] != "searched" || frames[0]["matches"] != float64(0) {
		t.Fatalf("search: %v %.300s", err, raw)
	}
	if took > 6*time.Second {
		t.Errorf("a search of 12 MiB for a query of 1 KiB took %v", took)
	}
}

// TestSearchFramesOfUnreadReplies: a match frame carried the line's "run"
// and "ts" as they were, and a line appended through the mount may make
// either a string of 1 MiB; a search runs 64 frames ahead of a reader
// that does not read, so two such searches of one uid held 128 MiB of the
// server. A frame's run and ts are now bounded (a run id, a time stamp).
func TestSearchFramesOfUnreadReplies(t *testing.T) {
	s := newFuseServer(t)
	u := &cred{uid: 1001, gid: 1001}
	sessionOfLines(t, s, u, "big", repeatLine(`{"role":"user","run":"`+strings.Repeat("r", 400000)+`","ts":"`+strings.Repeat("1", 600000)+`","content":"needle"}`+"\n", 80))
	pid := s.cmd.Process.Pid
	base := vmKB(t, pid, "VmRSS")
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			requestNoRead(t, u, s.root+"/agent/coder.sock", `{"op":"search","query":"needle"}`, 12)
		}()
	}
	time.Sleep(9 * time.Second) // the searches index and fill their replies' room
	grown := (vmKB(t, pid, "VmRSS") - base) / 1024
	wg.Wait()
	t.Logf("server grew by %d MiB with two unread searches", grown)
	if grown > 40 {
		t.Errorf("two unread searches of one uid took the server %d MiB", grown)
	}
}

// TestSearchIndexLeavesWithSession: a session's search index (root's
// files under <home>/.search) leaves the store when the session is
// deleted or archived. It stayed until a later search of the same agent
// found it stale, so a user who searched, deleted the sessions (their
// history given back) and went on in another agent left the indexes
// behind, counted nowhere.
func TestSearchIndexLeavesWithSession(t *testing.T) {
	s := limitedServer(t, "names=100", nil)
	for _, name := range []string{"arch", "d", "keep"} { // keep is the current one, which no archive takes
		s.sendAs(uid1001, name, "q-"+name, "", "zebrafish "+strings.Repeat("words of a session ", 2000))
	}
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "search", "coder", "zebrafish"); code != 0 {
		t.Fatalf("search: exit %d\n%s%s", code, out, errs)
	}
	index := filepath.Join(s.store, "home/1001/.search/agent/coder")
	indexed := func(name string) bool {
		_, err := os.Stat(filepath.Join(index, name))
		return err == nil
	}
	for _, name := range []string{"keep", "d", "arch"} {
		if !indexed(name) {
			t.Fatalf("no index of %s after a search", name)
		}
	}
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "gc", "coder", "--pattern", "d", "--delete", "--yes"); code != 0 {
		t.Fatalf("delete d: exit %d\n%s%s", code, out, errs)
	}
	if out, errs, code := ctxSplitAs(t, s, uid1001, "agent", "session", "archive", "coder", "arch"); code != 0 {
		t.Fatalf("archive arch: exit %d\n%s%s", code, out, errs)
	}
	for name, want := range map[string]bool{"keep": true, "d": false, "arch": false} {
		if got := indexed(name); got != want {
			t.Errorf("the index of %s in the store: %v, want %v", name, got, want)
		}
	}
}
