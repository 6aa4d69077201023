package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// limitedServer is a server with small per-uid quotas (CTXFS_LIMITS), its
// mount reachable by other uids.
func limitedServer(t *testing.T, limits string, configure func(*server)) *server {
	t.Helper()
	requireFUSE(t)
	s := newServerWith(t, func(s *server) {
		s.env = append(s.env, "CTXFS_LIMITS="+limits)
		if configure != nil {
			configure(s)
		}
	})
	openToAll(t, s.root)
	return s
}

// holdConns opens n connections to the coder socket as uid and keeps them
// open, sending nothing; it prints, for each, the first reply line (or
// "none") once the server answers or closes it, and exits when all are
// answered. It returns the output after limit seconds at most.
const holdConns = `
import socket, sys, select, time
n, path, limit = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
socks = []
for i in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    socks.append(s)
print("connected", n, flush=True)
start, got = time.time(), {}
while len(got) < n and time.time() - start < limit:
    r, _, _ = select.select([s for s in socks if s not in got], [], [], 0.5)
    for s in r:
        got[s] = (s.recv(65536).decode().strip() or "none", round(time.time() - start, 1))
for s in socks:
    print(got.get(s, ("open", 0)))
`

// TestConnectionQuota: a uid's connections beyond its quota are refused at
// once with EAGAIN; another uid (root) sends meanwhile without waiting;
// a connection that sends no request is closed with ETIMEDOUT after the
// request deadline.
func TestConnectionQuota(t *testing.T) {
	s := limitedServer(t, "conns=4", nil)
	flood := &proc{Cmd: exec.Command("/usr/bin/python3", "-c", holdConns, "12", s.root+"/agent/coder.sock", "15"), lines: make(chan string, 16)}
	startAs(t, flood, &cred{uid: 1001, gid: 1001})
	// Its connections made, not a second's sleep: a python3 that had not
	// connected yet on a loaded machine made the send below no test.
	waitLine(t, flood, "connected 12")
	start := time.Now()
	frames := s.mustRequest("coder", `{"op":"send","id":"root1","input":"through the flood"}`)
	// Held behind the flood, the send would end with the flood's held
	// connections, at the request deadline; well before it, it did not
	// wait (a fixed 2 s was a loaded machine's send time, not a wait).
	if took := time.Since(start); took > quota.RequestDeadline/2 || frames[len(frames)-1]["type"] != "done" {
		t.Errorf("root's send during the flood: %v, %v", took, frames)
	}
	var lines []string
	for l := range flood.lines {
		lines = append(lines, l)
	}
	flood.Wait()
	out := strings.Join(lines, "\n")
	refused, timedOut := strings.Count(out, `"code":"EAGAIN"`), strings.Count(out, `"code":"ETIMEDOUT"`)
	if refused != 8 || timedOut != 4 {
		t.Fatalf("12 idle connections of one uid with a quota of 4: %d refused (EAGAIN), %d closed at the deadline (ETIMEDOUT); want 8 and 4\n%s", refused, timedOut, out)
	}
}

// TestOpenFilesQuota: a uid may hold so many files open through the mount,
// then gets EMFILE; root is not limited; closed files are given back.
func TestOpenFilesQuota(t *testing.T) {
	s := limitedServer(t, "open=8", nil)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "q", "c1", "", "hello")
	dir := s.mnt("home/1001/agent/coder/session/q")
	script := `
import os, sys
fds, err = [], "none"
for i in range(20):
    try:
        fds.append(os.open(sys.argv[1] + "/" + ["state", "messages.jsonl", "latest.md"][i % 3], os.O_RDONLY))
    except OSError as e:
        err = e.strerror
        break
print(len(fds), err)
`
	out, err := runCmd(t, u, nil, "/usr/bin/python3", "-c", script, dir)
	if err != nil || strings.TrimSpace(out) != "8 Too many open files" {
		t.Fatalf("uid 1001 opening 20 files with a quota of 8: %v %q", err, out)
	}
	// Its files were closed when it exited: it may open them again; root
	// is not counted at all.
	if out, err := runCmd(t, u, nil, "/usr/bin/python3", "-c", script, dir); err != nil || !strings.HasPrefix(out, "8 ") {
		t.Fatalf("again after closing: %v %q", err, out)
	}
	if out, err := runCmd(t, nil, nil, "/usr/bin/python3", "-c", script, dir); err != nil || strings.TrimSpace(out) != "20 none" {
		t.Fatalf("root: %v %q", err, out)
	}
}

// TestRunQuota: a uid may have so many runs queued or running; one more
// send is refused with EAGAIN and writes nothing; when a run ends, sends
// work again.
func TestRunQuota(t *testing.T) {
	s := limitedServer(t, "runs=2", func(s *server) {
		s.define("slow", map[string]string{"abi": "text", "program": "#!/bin/sh\necho working\nsleep 3\n"})
	})
	u := &cred{uid: 1001, gid: 1001}
	sock := func(line string) ([]frame, string, error) { return s.requestAs(u, "slow", line) }
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sock(fmt.Sprintf(`{"op":"send","id":"r%d","session":"s%d","input":"x"}`, i, i))
		}()
	}
	eventually(t, 10*time.Second, "two runs running", func() bool {
		n := 0
		for i := 0; i < 2; i++ {
			if st := readFileMaybe(filepath.Join(s.sessionDirAgent(1001, "slow", "s"+strconv.Itoa(i)), "state")); st == "active\n" {
				n++
			}
		}
		return n == 2
	})
	settle() // the index moves after the state, and the derived files reach the store behind: let both runs' starts be all written
	before := snapshot(t, s.store)
	frames, raw, err := sock(`{"op":"send","id":"r9","session":"s9","input":"x"}`)
	if err != nil || len(frames) != 1 || frames[0]["code"] != "EAGAIN" {
		s.cmd.Process.Signal(syscall.SIGQUIT)
		time.Sleep(time.Second)
		t.Fatalf("a third run with a quota of 2: %v %s\nserver log:\n%s", err, raw, s.logText())
	}
	testkit.Same(t, "a send refused for the quota", before, snapshot(t, s.store))
	wg.Wait()
	frames, raw, err = sock(`{"op":"send","id":"r9","session":"s9","input":"x"}`)
	if err != nil || frames[len(frames)-1]["type"] != "done" {
		t.Fatalf("a send after the runs ended: %v %s", err, raw)
	}
}

// TestManySessionsFewDescriptors: with a descriptor limit of 256, sends to
// 10,000 sessions from 8 clients all succeed, and the server never holds
// more descriptors than its limit allows (its session cache closes the
// sessions nobody uses).
func TestManySessionsFewDescriptors(t *testing.T) {
	s := limitedServer(t, "conns=64", func(s *server) { s.wrap = []string{"prlimit", "--nofile=256:256"} })
	pid := s.cmd.Process.Pid
	peak := 0
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil && len(ents) > peak {
				peak = len(ents)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	failures := make(chan string, 10000)
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < 10000; i += 8 {
				frames, err := s.request("coder", fmt.Sprintf(`{"op":"send","id":"m%d","session":"many-%d","input":"x"}`, i, i))
				if err != nil || len(frames) == 0 || frames[len(frames)-1]["type"] != "done" {
					failures <- fmt.Sprintf("session %d: %v %v", i, err, frames)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	close(failures)
	for f := range failures {
		t.Fatalf("a send failed under a low descriptor limit: %s\nserver log:\n%s", f, lastLines(s.logText(), 20))
	}
	if peak > 256 || peak == 0 {
		t.Fatalf("peak descriptors %d, limit 256", peak)
	}
	t.Logf("peak descriptors: %d of 256", peak)
}

// readFileMaybe is a file's content, or "" when it cannot be read.
func readFileMaybe(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// sessionDirAgent is sessionDir for another agent than coder.
func (s *server) sessionDirAgent(uid int, agent, name string) string {
	return filepath.Join(s.store, "home", strconv.Itoa(uid), "agent", agent, "session", name)
}

// sendMany sends argv[3] requests to the socket argv[1], each on a
// connection of its own, the session argv[2], and prints how many ended
// with a done frame.
const sendMany = `
import json, socket, sys
done = 0
for i in range(int(sys.argv[3])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sys.argv[1])
    s.sendall(json.dumps({"op": "send", "id": "m%d" % i, "session": sys.argv[2], "input": "hi"}).encode() + b"\n")
    buf = b"".join(iter(lambda: s.recv(65536), b""))
    s.close()
    done += b'"type":"done"' in buf
print(done)
`

// TestRunsFileHoldsOpenRuns: the runs file (<store>/.ctxfs/running, root's)
// holds the runs under way, not every run the server started: 1,000
// sends of uid 1001 to a session with a long name leave it under 80 KiB,
// where it grew by each run's two lines for as long as the server lived. A start after a kill -9 reads it and sends go on.
func TestRunsFileHoldsOpenRuns(t *testing.T) {
	s := limitedServer(t, "names=100", nil)
	name := strings.Repeat("s", 64) // the longest a name may be (abi.MaxNameLen)
	const sends, most = 1000, 80 << 10
	out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", sendMany, s.mnt("agent/coder.sock"), name, fmt.Sprint(sends))
	testkit.Must(t, err)
	if got := strings.TrimSpace(out); got != fmt.Sprint(sends) {
		t.Fatalf("%d sends as uid 1001: %s done", sends, got)
	}
	st, err := os.Stat(filepath.Join(s.store, ".ctxfs", "running"))
	testkit.Must(t, err)
	if st.Size() > most {
		t.Errorf("after %d runs of uid 1001, none under way, the runs file holds %d bytes, want at most %d", sends, st.Size(), most)
	}
	s.restart(syscall.SIGKILL)
	s.sendAs(uid1001, name, "after", "", "after a restart")
}
