package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusedLineAcrossPages: an invalid line written with one write(2)
// that crosses a page boundary reaches the server as two writes; the
// first piece (no newline yet) is taken, the second refused. Whatever
// write(2) returned (an error, or a short count), the close fails with
// EINVAL, nothing of the line reaches the log, the loss is recorded as an
// error event, and a valid line written the same way is taken whole.
func TestRefusedLineAcrossPages(t *testing.T) {
	s := newFuseServer(t)
	s.send("p", "p1", "hello")
	log := s.mnt(sessRel("p") + "/messages.jsonl")
	store := filepath.Join(s.sessionDir(0, "coder", "p"), "messages.jsonl")
	// One write(2) each, from an offset inside a page, of a line longer
	// than a page: python reports what write and close said.
	script := `
import os, sys
line = sys.argv[2].encode()
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
try:
    n = os.write(fd, line)
    print("wrote", n, "of", len(line))
except OSError as e:
    print("write", e.strerror)
try:
    os.close(fd)
    print("close ok")
except OSError as e:
    print("close", e.strerror)
`
	write := func(line string) string {
		out, err := runCmd(t, nil, nil, "/usr/bin/python3", "-c", script, log, line)
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		return out
	}
	before := fileBytes(t, store)
	evBefore := len(fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "p"), "events.jsonl")))
	bad := `{"role":"user","content":"` + strings.Repeat("z", 6000) + `"} trailing garbage` + "\n"
	out := write(bad)
	t.Logf("invalid line: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "close Invalid argument") && !strings.Contains(out, "write Invalid argument") {
		t.Fatalf("an invalid line across pages was not refused at write or close:\n%s", out)
	}
	if strings.Contains(out, "close ok") && !strings.Contains(out, "write Invalid argument") {
		t.Fatalf("a short count and a clean close lose the line silently:\n%s", out)
	}
	if got := fileBytes(t, store); got != before {
		t.Fatalf("part of a refused line reached the log")
	}
	events := fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "p"), "events.jsonl"))[evBefore:]
	if !strings.Contains(events, `"type":"error","code":"EINVAL"`) || !strings.Contains(events, `"file":"messages.jsonl"`) {
		t.Fatalf("the refused line was not recorded:\n%s", events)
	}
	good := `{"role":"user","content":"` + strings.Repeat("y", 6000) + `"}` + "\n"
	if out := write(good); !strings.Contains(out, "wrote 6029 of 6029") || !strings.Contains(out, "close ok") {
		t.Fatalf("a valid line across pages: %s", out)
	}
	if got := fileBytes(t, store); got != before+withUid(strings.TrimSuffix(good, "\n"), 0)+"\n" {
		t.Fatalf("the valid line is not the log's new end")
	}
	if _, err := os.Stat(log); err != nil {
		t.Fatal(err)
	}
}
