package integration

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// BenchmarkPendingCLI: `ctx agent pending writer` (the real client,
// process start included) on a server holding 10,000 sessions and 100
// calls waiting, 25 of them the caller's. The server lists them from its
// waiting room by uid, so neither count of sessions should show.
func BenchmarkPendingCLI(b *testing.B) {
	configure, _ := approvalAgent(b)
	s := newServerWith(b, configure)
	for i := range 10000 {
		s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"c%d","session":"s%d","input":"hi"}`, i, i))
	}
	var users []*cred
	for u := range 4 {
		users = append(users, &cred{uid: 1001 + uint32(u), gid: 1001 + uint32(u)})
	}
	for i := range 100 {
		leaveWaiting(b, s, users[i%len(users)], fmt.Sprint("w", i))
	}
	b.ResetTimer()
	for b.Loop() {
		out, errs, code := ctxSplitAs(b, s, users[0], "agent", "pending", "writer")
		if code != 0 || strings.Count(out, "\n") != 25 {
			b.Fatalf("pending: %d lines, %q, exit %d", strings.Count(out, "\n"), errs, code)
		}
	}
}

// leaveWaiting starts a send as c in session whose run waits for
// approval, and ends the client once the run waits: the call goes on
// waiting without it.
func leaveWaiting(tb testing.TB, s *server, c *cred, session string) {
	tb.Helper()
	cmd := exec.Command(ctxBin, "agent", "send", "writer", "--session", session, "please write")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "CTX_ROOT=" + s.root}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid}}
	stderr, err := cmd.StderrPipe()
	testkit.Must(tb, err)
	testkit.Must(tb, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if hintRE.MatchString(sc.Text()) {
				found <- true
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		if !ok {
			tb.Fatalf("send as %s ended without waiting", credName(c))
		}
	case <-time.After(cmdLimit):
		tb.Fatalf("send as %s: no call waited within %v", credName(c), cmdLimit)
	}
}
