package integration

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// BenchmarkPending: the op pending (what `ctx agent pending` asks) of a
// uid with 10,000 sessions at the agent, 100 of them with a call waiting
// for an answer (SPEC 17; aim: under 100 ms), against a readdir of the
// sessions' directory in the store, side by side in one run.
func BenchmarkPending(b *testing.B) {
	const sessions, waitingCalls = 10000, 100
	p := newFakeProvider(b, openAICall("q", "ask_user", `{"text":"ok?"}`))
	s := newModelServer(b, "openai-chat", p.URL+"/v1", nil)
	s.kill(s.cmd, syscall.SIGTERM)
	s.env = append(s.env, fmt.Sprintf("CTXFS_LIMITS=runs=%d,waiting=%d,conns=%d", waitingCalls+8, waitingCalls+8, 2*waitingCalls+16))
	s.define("doer", map[string]string{"model": "fake/llm", "tools": "ask_user\n"})
	s.start()
	home := s.mnt("home/1001/agent/doer/session")
	for from := 1; from <= sessions-waitingCalls; from += 500 { // in batches: each command has a deadline
		script := fmt.Sprintf("mkdir -p %s && cd %s && for i in $(seq %d %d); do mkdir s$i; done", home, home, from, min(from+499, sessions-waitingCalls))
		if out, err := bashAs(b, owner, script); err != nil {
			b.Fatalf("making the sessions: %v\n%s", err, out)
		}
	}
	for i := 0; i < waitingCalls; i++ {
		go s.requestAsWithin(owner, "doer", fmt.Sprintf(`{"op":"send","id":"w%d","session":"w%d","input":"ask"}`, i, i), time.Hour)
	}
	sock := filepath.Join(s.root, "agent", "doer.sock")
	ask := func() int {
		conn, err := dialAs(sock, 1001)
		testkit.Must(b, err)
		defer conn.Close()
		fmt.Fprintln(conn, `{"op":"pending"}`)
		n := 0
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"type":"pending"`) {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(2 * time.Minute)
	for ask() != waitingCalls {
		if time.Now().After(deadline) {
			b.Fatalf("the %d calls are not all waiting", waitingCalls)
		}
		time.Sleep(100 * time.Millisecond)
	}
	store := filepath.Join(s.store, "home", "1001", "agent", "doer", "session")
	n := max(b.N, 20)
	readdir := perRun(n, func(int) {
		ents, err := os.ReadDir(store)
		testkit.Must(b, err)
		if len(ents) < sessions {
			b.Fatalf("%d sessions in the store", len(ents))
		}
	})
	pending := perRun(n, func(int) {
		if got := ask(); got != waitingCalls {
			b.Fatalf("pending lists %d calls", got)
		}
	})
	b.ReportMetric(float64(pending)/1e6, "ms/pending")
	b.ReportMetric(float64(readdir)/1e6, "ms/readdir")
	b.ReportMetric(float64(pending)/float64(readdir), "pending/readdir")
}

// dialAs connects to a Unix socket as uid: the peer credentials are the
// effective ids of the thread that connects, so the effective uid of one
// locked thread is switched around the connect (a forked client, what
// requestAs runs, would cost more than the op it measures).
func dialAs(sock string, uid int) (net.Conn, error) {
	runtime.LockOSThread()
	keep := uintptr(^uint(0)) // -1: leave that id as it is
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
		runtime.UnlockOSThread()
		return nil, e
	}
	conn, err := net.Dial("unix", sock)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep); e != 0 {
		return nil, e // the thread stays locked, and dies with its goroutine
	}
	runtime.UnlockOSThread()
	return conn, err
}
