package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// vmKB reads a field (VmRSS, VmHWM) of /proc/PID/status, in KiB.
func vmKB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	testkit.Must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// requestNoRead connects to the socket sock as c (nil: root), writes
// the request line req and reads nothing for secs seconds.
func requestNoRead(t *testing.T, c *cred, sock, req string, secs int) {
	t.Helper()
	const script = `
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
time.sleep(float(sys.argv[3]))
`
	runCmd(t, c, nil, "/usr/bin/python3", "-c", script, sock, req, strconv.Itoa(secs))
}

// TestClientsThatDoNotRead: ten runs that each stream 8 MiB of deltas to a
// client that sends its request and never reads. The server keeps, per
// run, the streamed text until it is recorded as the run's answer, and at
// most 1 MiB of frames its reader has not read, not everything streamed to
// it: its peak resident memory grows by less than twice 10 × (8 + 1) MiB
// (the garbage collector lets the heap grow to twice what is live) and a
// margin, and every run ends recorded. (With the text held in one buffer
// that doubled as it grew, and every frame kept for late readers, the same
// runs took the server to 580 MiB.)
func TestClientsThatDoNotRead(t *testing.T) {
	s := newServerWith(t, func(s *server) {
		s.define("flood", map[string]string{"abi": "jsonl",
			"program": "#!/bin/sh\ni=0\nwhile [ $i -lt 8192 ]; do printf '{\"type\":\"delta\",\"text\":\"%01000d\"}\\n' 0; i=$((i+1)); done\n"})
	})
	pid := s.cmd.Process.Pid
	base := vmKB(t, pid, "VmRSS")
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			requestNoRead(t, nil, s.root+"/agent/flood.sock", fmt.Sprintf(`{"op":"send","id":"n%d","session":"n%d","input":"go"}`, i, i), 15)
		}()
	}
	// The runs end (recorded) while their clients still do not read.
	eventually(t, 60*time.Second, "ten flooding runs done", func() bool {
		n := 0
		for i := 0; i < 10; i++ {
			if readFileMaybe(s.sessionDirAgent(0, "flood", fmt.Sprintf("n%d", i))+"/state") == "done\n" {
				n++
			}
		}
		return n == 10
	})
	peak := vmKB(t, pid, "VmHWM")
	wg.Wait()
	growth := (peak - base) / 1024
	t.Logf("server resident memory: %d MiB before, peak %d MiB (+%d MiB) for 10 runs × 8 MiB streamed to clients that do not read", base/1024, peak/1024, growth)
	if growth > 2*10*(8+1)+64 {
		t.Fatalf("peak resident memory grew by %d MiB", growth)
	}
}

// manySends sends, as one client, argv[2] sends of argv[3] bytes each to
// session big at the socket argv[1], with client ids argv[4]0, argv[4]1, …
const manySends = `
import json, socket, sys
path, n, size, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for i in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall((json.dumps({"op": "send", "id": "%s%d" % (prefix, i), "session": "big", "input": chr(97 + i % 26) * size}) + "\n").encode())
    r = b""
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        r += d
    if b'"status":"ok"' not in r:
        print("send", i, r[-300:])
        sys.exit(1)
print("sent", n)
`

// TestSessionKeepsNoInputs: a loaded session keeps of each send what
// tells a replay from a reuse of its client id, not its input: it kept
// every input, so 200 sends of 900,000 bytes to one session grew the
// server by 344 MiB, for as long as the session stayed loaded (no idle
// session is let go below the budget of loaded sessions). A replay with
// the same input still gets the recorded run, another input EINVAL, also
// once the session is loaded again after a restart.
func TestSessionKeepsNoInputs(t *testing.T) {
	s := limitedServer(t, "runs=32", nil)
	pid := s.cmd.Process.Pid
	sock := filepath.Join(s.root, "agent", "coder.sock")
	if out, err := runCmd(t, owner, nil, "/usr/bin/python3", "-c", manySends, sock, "1", "10", "w"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	base := vmKB(t, pid, "VmRSS")
	if out, err := runCmd(t, owner, nil, "/usr/bin/python3", "-c", manySends, sock, "200", "900000", "m"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	time.Sleep(5 * time.Second)
	grown := (vmKB(t, pid, "VmRSS") - base) / 1024
	t.Logf("the server grew by %d MiB over 200 sends of 900,000 bytes to one session", grown)
	if grown >= 120 {
		t.Fatalf("the server grew by %d MiB over 200 sends of 900,000 bytes: the session keeps their inputs", grown)
	}
	for round := 0; round < 2; round++ { // as sent, then as loaded again from the logs
		if out, err := runCmd(t, owner, nil, "/usr/bin/python3", "-c", manySends, sock, "4", "900000", "m"); err != nil {
			t.Fatalf("replays of the same inputs: %v %s", err, out)
		}
		if out, err := runCmd(t, owner, nil, "/usr/bin/python3", "-c", manySends, sock, "1", "10", "m"); err == nil || !strings.Contains(out, "EINVAL") {
			t.Fatalf("a reuse of a client id with another input: %v %s", err, out)
		}
		s.restart(syscall.SIGTERM)
	}
}
