package integration

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// Exactness of a warm log (issue 26): a log of several MiB, whose pages
// the kernel keeps (FOPEN_KEEP_CACHE, readahead of 1 MiB), ends inside a
// cached page. After each kind of write — an append through the mount, a
// send through the socket and through ctl, another uid's append and send
// to a shared session, a value written beside it — a reader that keeps
// the log open and one that opens it anew see its exact size and bytes at
// once (no sleep, no retry), and `tail -f` prints the new line within a
// second. The readers run as a python3 process of their own (warmHolder),
// as another uid where the session is shared.

// warmHolderScript keeps path open and, at each line on stdin, looks:
// the held descriptor's fstat size; what it reads on from where it
// stopped (a follower's view), added to all it read so far; a pread of
// the whole file through it; a stat and a whole read through a new open.
// It prints one line: "fstat sha(followed) sha(pread) stat sha(new)".
const warmHolderScript = `
import hashlib, os, sys
p = sys.argv[1]
held = open(p, 'rb', buffering=0)
followed = b''
def h(b): return hashlib.sha256(b).hexdigest()
for _ in sys.stdin:
    size = os.fstat(held.fileno()).st_size
    while True:
        b = held.read(1 << 20)
        if not b: break
        followed += b
    whole = os.pread(held.fileno(), size + (1 << 20), 0)
    st = os.stat(p).st_size
    with open(p, 'rb') as f: fresh = f.read()
    print(size, h(followed), h(whole), st, h(fresh), flush=True)
`

// warmHolder is a reader of one log through the mount that keeps it open
// between looks.
type warmHolder struct {
	t     *testing.T
	who   *cred
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	mnt   string
	store string
}

// holdWarm starts a holder of the log at rel as c (nil: root) and has it
// look once, which fills the kernel's cache of the log.
func holdWarm(t *testing.T, s *server, c *cred, rel string) *warmHolder {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", warmHolderScript, s.mnt(rel))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}
	}
	in, err := cmd.StdinPipe()
	testkit.Must(t, err)
	out, err := cmd.StdoutPipe()
	testkit.Must(t, err)
	cmd.Stderr = os.Stderr
	testkit.Must(t, cmd.Start())
	t.Cleanup(func() { in.Close(); stopProcess(cmd, syscall.SIGKILL) })
	h := &warmHolder{t: t, who: c, cmd: cmd, in: in, out: bufio.NewReader(out), mnt: s.mnt(rel), store: filepath.Join(s.store, rel)}
	h.exact("warm")
	return h
}

// exact has the holder look and fails the test unless each of its views
// is the store's log as it is now.
func (h *warmHolder) exact(what string) {
	h.t.Helper()
	want := fileBytes(h.t, h.store)
	sum := sha256.Sum256([]byte(want))
	wantSum := hex.EncodeToString(sum[:])
	timer := time.AfterFunc(cmdLimit, func() { h.cmd.Process.Kill() }) // a hung look ends the read below
	defer timer.Stop()
	if _, err := io.WriteString(h.in, "look\n"); err != nil {
		h.t.Fatalf("%s: holder as %s: %v", what, credName(h.who), err)
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		h.t.Fatalf("%s: holder as %s: %v", what, credName(h.who), err)
	}
	var fstat, stat int64
	var followed, whole, fresh string
	if n, _ := fmt.Sscan(line, &fstat, &followed, &whole, &stat, &fresh); n != 5 {
		h.t.Fatalf("%s: holder as %s said %q", what, credName(h.who), line)
	}
	for _, v := range []struct {
		view string
		ok   bool
	}{
		{fmt.Sprintf("fstat of the held descriptor: %d bytes", fstat), fstat == int64(len(want))},
		{"the held descriptor read on from where it stopped", followed == wantSum},
		{"a pread of the whole log through the held descriptor", whole == wantSum},
		{fmt.Sprintf("stat: %d bytes", stat), stat == int64(len(want))},
		{"a read through a new open", fresh == wantSum},
	} {
		if !v.ok {
			h.t.Errorf("%s: %s as %s is not the store's log (%d bytes)", what, v.view, credName(h.who), len(want))
		}
	}
}

// bigLog appends about size bytes of 1021-byte lines through the mount as
// root, so that the log spans several MiB and ends inside a page.
func bigLog(t *testing.T, path string, size int) {
	t.Helper()
	testkit.Must(t, appendMnt(path, string(jsonLines(size/1021*1021, 1021))))
}

// TestWarmLogExact: root's session log of 3 MiB is held warm by a reader
// that keeps it open, by root and by tail -f; after an append through the
// mount, a send through the socket, a send through ctl and a value
// written beside it, every view is exact at once and tail -f prints the
// log within a second.
func TestWarmLogExact(t *testing.T) {
	s := newFuseServer(t)
	s.send("w", "w0", "first")
	rel := sessRel("w") + "/messages.jsonl"
	bigLog(t, s.mnt(rel), 3<<20)
	holder := holdWarm(t, s, nil, rel)
	tail := startTail(t, s.mnt(rel))
	tail.followsAll(t, s.mnt(rel), holder.store)
	for round := 0; round < 3; round++ {
		testkit.Must(t, appendMnt(s.mnt(rel), fmt.Sprintf(`{"role":"user","content":"appended %d %s"}`+"\n", round, strings.Repeat("a", 100*round))))
		holder.exact(fmt.Sprintf("round %d, after an append through the mount", round))
		tail.followsAll(t, s.mnt(rel), holder.store)

		s.send("w", fmt.Sprintf("w%d", round+1), fmt.Sprintf("round %d %s", round, strings.Repeat("s", 5000)))
		holder.exact(fmt.Sprintf("round %d, after a send through the socket", round))
		tail.followsAll(t, s.mnt(rel), holder.store)

		bash(t, "exec 3<>"+s.mnt(sessRel("w")+"/ctl")+fmt.Sprintf(`; printf '%%s\n' '{"op":"send","id":"ctl%d","input":"through ctl"}' >&3; cat <&3 > /dev/null`, round))
		holder.exact(fmt.Sprintf("round %d, after a send through ctl", round))
		tail.followsAll(t, s.mnt(rel), holder.store)

		writeMnt(t, s.mnt(sessRel("w")+"/state"), []string{"done\n", "idle\n"}[round%2])
		holder.exact(fmt.Sprintf("round %d, after state was written", round))
	}
}

// TestWarmLogExactShared: in a shared space, uid 1001 holds a session log
// of several MiB warm (open, and read anew at each look); uid 1002
// appends to it through the mount and sends to it; after each, uid 1001's
// views are exact at once, and tail -f (root) prints it within a second.
func TestWarmLogExactShared(t *testing.T) {
	s := newFuseServer(t)
	s.spaceAdd("team", 1234)
	first, second := member(1001, 1234), member(1002, 1234)
	extra := `,"scope":"shared","space":"team"`
	for i := 0; i < 12; i++ { // 100 KiB a request: one argument of the socket client is at most 128 KiB
		s.sendAs(first, "t1", fmt.Sprintf("c1-%d", i), extra, fmt.Sprintf("%d %s", i, strings.Repeat("m", 100<<10)))
	}
	rel := "shared/team/agent/coder/session/t1/messages.jsonl"
	if st, err := os.Stat(filepath.Join(s.store, rel)); err != nil || st.Size() < 2<<20 {
		t.Fatalf("the shared log is not several MiB: %v %v", st, err)
	}
	holder := holdWarm(t, s, first, rel)
	tail := startTail(t, s.mnt(rel))
	tail.followsAll(t, s.mnt(rel), holder.store)
	for i := 0; i < 3; i++ {
		line := fmt.Sprintf(`{"role":"user","content":"from 1002, %d"}`, i)
		if out, err := bashAs(t, second, "printf '%s\\n' '"+line+"' >> "+s.mnt(rel)); err != nil {
			t.Fatalf("uid 1002 appends: %v %s", err, out)
		}
		holder.exact(fmt.Sprintf("after uid 1002's append %d", i))
		tail.followsAll(t, s.mnt(rel), holder.store)

		s.sendAs(second, "t1", fmt.Sprintf("c2-%d", i), extra, "from 1002")
		holder.exact(fmt.Sprintf("after uid 1002's send %d", i))
		tail.followsAll(t, s.mnt(rel), holder.store)
	}
}
