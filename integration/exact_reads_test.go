package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Reads through the mount are exact the moment a send returns (issue 20,
// item 1): the kernel may hold a log's attributes and pages however it
// came to hold them (a LOOKUP, a READDIRPLUS of `ls`, a stat), and every
// change must reach what it holds before it is acknowledged.

// flakyCommand is the text agent: it echoes its input and fails
// on the input "fail".
var flakyCommand = []string{"sh", "-c", `read x; [ "$x" = fail ] && exit 1; echo "$x"`}

// newFlakyServer starts a server with the flaky text agent.
func newFlakyServer(t *testing.T) *server {
	t.Helper()
	s := newFuseServer(t)
	exMustScript(t, "text-wrapper/wrap-agent", append([]string{"--root", s.root, "flaky"}, flakyCommand...)...)
	exWaitSocket(t, s, "flaky")
	return s
}

// TestExactReadsAfterSend is the sequence, typed as a person would:
// `ctx agent send` for each exchange, an `ls` of the session directory
// between two of them, and right after each send returns `cat | wc -l`,
// `stat -c %s` and `ctx agent history -n 1` must say what the store holds.
func TestExactReadsAfterSend(t *testing.T) {
	s := newFlakyServer(t)
	const session = "fresh"
	rel := "home/0/agent/flaky/session/" + session
	dir, store := s.mnt(rel), filepath.Join(s.store, rel)
	// The steps, with no look at the logs before ok3: then with a
	// look after every send.
	steps := []string{"ok1", "fail", "ok2", "ls", "ok3", "ok4", "ls", "fail", "ok5", "ls", "ok6"}
	for i, step := range steps {
		if step == "ls" {
			bash(t, "ls "+dir+" >/dev/null")
			continue
		}
		out, code := s.ctx(t, "agent", "send", "flaky", "--session", session, step)
		if want := map[bool]int{true: 1, false: 0}[step == "fail"]; code != want {
			t.Fatalf("step %d: send %s: exit %d, want %d\n%s", i, step, code, want, out)
		}
		if i < 4 {
			continue
		}
		checkExactLog(t, fmt.Sprintf("after send %d (%s)", i, step), dir, store, "messages.jsonl")
		checkExactLog(t, fmt.Sprintf("after send %d (%s)", i, step), dir, store, "events.jsonl")
		if step != "fail" {
			out, code := s.ctx(t, "agent", "history", "flaky", "--session", session, "-n", "1")
			if code != 0 || !strings.Contains(out, step) {
				t.Fatalf("after send %d (%s): history -n 1 printed %q (exit %d)", i, step, out, code)
			}
		}
	}
}

// checkExactLog compares a log through the mount (by `cat | wc -l`,
// `stat -c %s` and `cat`) with the store's file.
func checkExactLog(t testing.TB, what, dir, store, name string) {
	t.Helper()
	want := fileBytes(t, filepath.Join(store, name))
	p := filepath.Join(dir, name)
	lines := strings.TrimSpace(bash(t, "cat "+p+" | wc -l"))
	size := strings.TrimSpace(bash(t, "stat -c %s "+p))
	if wantLines := strconv.Itoa(strings.Count(want, "\n")); lines != wantLines || size != strconv.Itoa(len(want)) {
		t.Fatalf("%s: %s through the mount: %s lines, %s bytes; the store holds %s lines, %d bytes", what, name, lines, size, wantLines, len(want))
	}
	if got := bash(t, "cat "+p); got != want {
		t.Fatalf("%s: %s through the mount differs from the store's", what, name)
	}
	_ = os.Stat
}
