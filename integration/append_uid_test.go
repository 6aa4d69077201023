package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// The writer's uid on lines appended through the mount (issue 19,
// finding 10): abi/stamp.go.

// withUid is line (a JSON object, without its newline) as the server
// stores it when uid appended it through the mount: with "uid" last.
func withUid(line string, uid int) string {
	return strings.TrimSuffix(line, "}") + fmt.Sprintf(`,"uid":%d}`, uid)
}

// TestLogAppendCarriesUid: in a shared space, each line a member appends
// through the mount is stored with the member's uid ("uid", last), so a
// member writing a line under another member's run id is known; a line
// that carries another uid (a forgery) is refused whole with EINVAL and
// nothing is written; a line carrying the writer's own uid is stored as
// written. The lines of sends are not stamped, stat sizes stay exact,
// and fsck finds the store clean.
func TestLogAppendCarriesUid(t *testing.T) {
	s := newFuseServer(t)
	s.spaceAdd("team", 1234)
	first, second := member(1001, 1234), member(1002, 1234)
	frames := s.sendAs(first, "t1", "c1", `,"scope":"shared","space":"team"`, "hello team")
	run := frames[0]["run"]
	rel := "shared/team/agent/coder/session/t1/messages.jsonl"
	storeLog := filepath.Join(s.store, "shared", "team", "agent", "coder", "session", "t1", "messages.jsonl")
	sent := fileBytes(t, storeLog)
	if strings.Contains(sent, `"uid"`) {
		t.Errorf("a send's lines carry a uid:\n%s", sent)
	}

	impostor := fmt.Sprintf(`{"role":"user","run":%q,"content":"in 1001's run"}`, run)
	own := `{"role":"user","content":"mine","uid":1002}`
	testkit.Must(t, appendAs(t, second, s.mnt(rel), impostor+"\n"+own+"\n"))
	want := sent + withUid(impostor, 1002) + "\n" + own + "\n"
	if got := fileBytes(t, storeLog); got != want {
		t.Fatalf("after uid 1002's append the log ends:\n%s\nwant:\n%s", lastLines(got, 2), lastLines(want, 2))
	}
	for _, forged := range []string{
		`{"role":"user","content":"as 1001","uid":1001}`,
		`{"role":"user","content":"twice","uid":1002,"uid":1001}`,
		`{"role":"user","content":"escaped","u\u0069d":1001}`,
	} {
		err := appendAs(t, second, s.mnt(rel), `{"role":"user","content":"fine"}`+"\n"+forged+"\n")
		testkit.WantErrno(t, "a line with another's uid", err, syscall.EINVAL)
	}
	if got := fileBytes(t, storeLog); got != want {
		t.Errorf("a refused forgery changed the log")
	}
	if st, err := os.Stat(s.mnt(rel)); err != nil || st.Size() != int64(len(want)) {
		t.Errorf("stat through the mount: %v, size %d, want %d", err, st.Size(), len(want))
	}
	if got := s.readMnt(rel); got != want {
		t.Errorf("a reader sees other bytes than the log's")
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: %d\n%s", code, out)
	}
}

// appendAs appends data to path through the mount as c, with one write
// and a close (appendMnt as another uid), and returns what failed.
func appendAs(t *testing.T, c *cred, path, data string) error {
	t.Helper()
	script := `
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
try:
    os.write(fd, sys.argv[2].encode())
finally:
    os.close(fd)
`
	out, err := runCmd(t, c, nil, "/usr/bin/python3", "-c", script, path, data)
	switch {
	case err == nil:
		return nil
	case strings.Contains(out, "Errno 22"):
		return syscall.EINVAL
	}
	return fmt.Errorf("%v: %s", err, out)
}

// writeAs writes data to path through the mount as c (made or truncated,
// one write and a close), as a user's editor saves a file.
func writeAs(t *testing.T, c *cred, path, data string) error {
	t.Helper()
	if out, err := runCmd(t, c, nil, "/usr/bin/python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path, data); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
