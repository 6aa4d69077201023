package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

const versionsIndex = `{"v":1,"run":"R1","call":"c1","path":"/w/a.txt","action":"create"}
{"v":2,"run":"R1","call":"c2","path":"/w/a.txt","action":"modify","sha256":"` + "ab" + `","size":12}
{"v":3,"run":"R2","call":"c1","path":"/w/b.txt","action":"delete","sha256":"cd","size":0}
`

func TestVersionsList(t *testing.T) {
	a := runsAgent(t)
	dir := writeSession(t, a.root, "coder", "s", "", "")
	testkit.Must(t, os.MkdirAll(filepath.Join(dir, "versions"), 0o755))
	testkit.Must(t, os.WriteFile(filepath.Join(dir, "versions/index.jsonl"), []byte(versionsIndex), 0o644))
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "1\tR1\tc1\tcreate\t/w/a.txt\t-\n2\tR1\tc2\tmodify\t/w/a.txt\t12\n3\tR2\tc1\tdelete\t/w/b.txt\t0\n"},
		{[]string{"/w/b.txt"}, "3\tR2\tc1\tdelete\t/w/b.txt\t0\n"},
		{[]string{"/w/none"}, ""},
		{[]string{"--json", "/w/a.txt"}, strings.Join(strings.Split(versionsIndex, "\n")[:2], "\n") + "\n"},
	} {
		out, errs, code := ctxRun(a.root, "", append([]string{"agent", "versions", "coder", "--session", "s"}, c.args...)...)
		if out != c.want || code != 0 {
			t.Errorf("%q: code %d out %q stderr %q, want %q", c.args, code, out, errs, c.want)
		}
	}
	// A session no tool changed a file of has no versions: nothing, ok.
	writeSession(t, a.root, "coder", "empty", "", "")
	if out, errs, code := ctxRun(a.root, "", "agent", "versions", "coder", "--session", "empty"); out != "" || code != 0 {
		t.Errorf("no versions: code %d out %q stderr %q", code, out, errs)
	}
	// No such session: not found, exit 1.
	if _, errs, code := ctxRun(a.root, "", "agent", "versions", "coder", "--session", "nosuch"); code != 1 || !strings.Contains(errs, "nosuch") {
		t.Errorf("no session: code %d stderr %q", code, errs)
	}
}

// restore sends the restore op, as SPEC 17 words it, and prints the reply
// as send does.
func TestRestoreRequest(t *testing.T) {
	root, ln := listenAgent(t)
	lines := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			lines <- line
			c.Write([]byte(`{"type":"start","run":"ctx-0123456789abcdef0123456789abcdef","id":"x"}` + "\n" +
				`{"type":"delta","run":"ctx-0123456789abcdef0123456789abcdef","text":"restored /w/a.txt"}` + "\n" +
				`{"type":"done","run":"ctx-0123456789abcdef0123456789abcdef","status":"ok"}` + "\n"))
			c.Close()
		}
	}()
	for _, c := range []struct {
		args []string
		want string // the request line without its id
	}{
		{[]string{"--version", "3"}, `"session":"s","scope":"private","version":3}`},
		{[]string{"--run", "R1", "/w/a.txt"}, `"session":"s","scope":"private","run":"R1","path":"/w/a.txt"}`},
	} {
		out, errs, code := ctxRun(root, "", append([]string{"agent", "restore", "coder", "--session", "s"}, c.args...)...)
		if code != 0 || !strings.Contains(out, "restored /w/a.txt") {
			t.Errorf("%q: code %d out %q stderr %q", c.args, code, out, errs)
		}
		line := <-lines
		if !strings.HasPrefix(line, `{"op":"restore","id":"`) || !strings.HasSuffix(line, ","+c.want+"\n") {
			t.Errorf("%q: request %q, want ...%s", c.args, line, c.want)
		}
	}
	for _, args := range [][]string{nil, {"--version", "1", "--run", "R1"}, {"--version", "0"}, {"--version", "x"}} {
		if _, errs, code := ctxRun(root, "", append([]string{"agent", "restore", "coder", "--session", "s"}, args...)...); code != 2 || errs == "" {
			t.Errorf("%q: code %d stderr %q, want a usage error", args, code, errs)
		}
	}
	if len(lines) != 0 {
		t.Errorf("a refused restore was sent: %q", <-lines)
	}
}
