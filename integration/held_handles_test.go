package integration

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// What a user can make the server hold through open files of the mount,
// measured as the user would make it: a helper as uid 1001 keeps its
// descriptors open while the test reads the server's resident memory.

// holdOpen runs a Python script as c that opens what it holds, prints one
// line starting "ready" and keeps everything open until the test ends
// (its stdin is closed, then it is killed). It returns the line after
// "ready".
func holdOpen(t *testing.T, c *cred, script string, args ...string) string {
	t.Helper()
	stdin, keep, err := os.Pipe() // the helper holds until keep is closed
	testkit.Must(t, err)
	defer stdin.Close()
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", script}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid}}
	cmd.Dir, cmd.Stdin, cmd.Stderr = "/", stdin, os.Stderr
	out, err := cmd.StdoutPipe()
	testkit.Must(t, err)
	testkit.Must(t, cmd.Start())
	t.Cleanup(func() { keep.Close(); stopProcess(cmd, syscall.SIGKILL) })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "ready"); ok {
			return strings.TrimSpace(rest)
		}
		t.Fatalf("the holder as %s said %q", credName(c), l)
	case <-time.After(120 * time.Second):
		t.Fatalf("the holder as %s was not ready within 120 s", credName(c))
	}
	return ""
}

// serverGrowth is how much the server's resident memory grew since base
// (KiB), in MiB, once a second has let its collector run.
func (s *server) serverGrowth(t *testing.T, base int) int {
	time.Sleep(time.Second)
	return (vmKB(t, s.cmd.Process.Pid, "VmRSS") - base) / 1024
}

// refusedHolder opens a log N times for appending and writes 1 MiB of
// lines that are not JSON on each descriptor, keeping them all open; it
// prints how many writes ended with each errno.
const refusedHolder = `
import errno, os, sys
path, n = sys.argv[1], int(sys.argv[2])
data = b'x\n' * (1 << 19)
fds, got = [], {}
for i in range(n):
    fds.append(os.open(path, os.O_WRONLY | os.O_APPEND))
    try:
        os.write(fds[-1], data)
        e = 'written'
    except OSError as err:
        e = errno.errorcode[err.errno]
    got[e] = got.get(e, 0) + 1
print('ready', ' '.join('%s=%d' % kv for kv in sorted(got.items())), flush=True)
sys.stdin.read()
`

// TestRefusedWritesNotHeld: a user's 300 descriptors of its own log, each
// refused a write of 1 MiB (EINVAL) and kept open, write nothing and make
// the server hold almost nothing (each descriptor kept a copy of its
// refused write, outside the user's 16 MiB of unfinished bytes: the same
// took the server from 21 to 521 MiB).
func TestRefusedWritesNotHeld(t *testing.T) {
	s := newServer(t)
	openToAll(t, s.root)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "q", "c1", "", "hello")
	stored := s.sessionDir(1001, "coder", "q") + "/messages.jsonl"
	before := fileBytes(t, stored)
	base := vmKB(t, s.cmd.Process.Pid, "VmRSS")
	got := holdOpen(t, u, refusedHolder, s.mnt("home/1001/agent/coder/session/q/messages.jsonl"), "300")
	grown := s.serverGrowth(t, base)
	t.Logf("300 refused writes of 1 MiB on open descriptors: %s; the server grew by %d MiB", got, grown)
	if got != "EINVAL=300" {
		t.Errorf("300 writes of invalid lines: %s; want EINVAL=300", got)
	}
	if after := fileBytes(t, stored); after != before {
		t.Errorf("refused writes reached the log: %d bytes", len(after)-len(before))
	}
	if grown > 64 {
		t.Errorf("the server holds %d MiB more for 300 descriptors that each had a write refused", grown)
	}
}
