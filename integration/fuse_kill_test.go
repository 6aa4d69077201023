package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestKill9WithReadersAndWriters: SIGKILL the server while `tail -f`, a
// `cat` loop, writers through the mount and socket senders are attached.
// The dead mounts are cleaned up (by the server's watchdog, or by the next
// `ctxfs mount` on the same root); every acknowledged append and every
// start frame received is recorded once; fsck is clean.
func TestKill9WithReadersAndWriters(t *testing.T) {
	s := newFuseServer(t)
	keepFusectlAsIs(t)
	// Whatever happens, no dead connection may outlive the test: the
	// harness's unmount (and every reader) would hang on it.
	t.Cleanup(func() {
		mountlife.AbortDead(s.mnt("home"))
		mountlife.AbortDead(s.mnt("shared"))
	})
	s.send("k", "c0", "before the kill")
	dir := s.mnt(sessRel("k"))
	log := dir + "/messages.jsonl"

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var readers []*exec.Cmd
	for _, args := range [][]string{
		{"tail", "-s", "0.1", "-f", log},
		{"/bin/bash", "-c", "while true; do cat " + log + " > /dev/null 2>&1; cat " + dir + "/state > /dev/null 2>&1; done"},
	} {
		r := exec.CommandContext(ctx, args[0], args[1:]...)
		r.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		r.Cancel = func() error { return syscall.Kill(-r.Process.Pid, syscall.SIGKILL) }
		r.WaitDelay = 2 * time.Second
		testkit.Must(t, r.Start())
		readers = append(readers, r)
	}
	// stopReaders kills the readers and reports whether they were reaped:
	// a reader stuck in D state on a dead connection cannot be.
	stopReaders := func() bool {
		var wg sync.WaitGroup
		for _, r := range readers {
			if r.ProcessState == nil {
				syscall.Kill(-r.Process.Pid, syscall.SIGKILL)
				wg.Add(1)
				go func() { defer wg.Done(); r.Wait() }()
			}
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	t.Cleanup(func() { stopReaders() })

	// Writers through the mount are other processes: the test process
	// itself must hold no descriptor of the mount when the server dies,
	// or starting the next server (fork+exec closes them: FLUSH) would
	// wait on the dead connection.
	const writer = `
import json, os, sys
log, w = sys.argv[1], sys.argv[2]
i = 0
while True:
    tag = "w%s-%d" % (w, i)
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, (json.dumps({"role": "user", "content": tag}) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        sys.exit(0)
    print(tag, flush=True)
    i += 1
`
	acked := map[string]bool{}    // mount appends whose write and close succeeded
	var writerOut [3]bytes.Buffer // each writer's acknowledged tags, read once it is reaped
	for w := range writerOut {
		wc := exec.CommandContext(ctx, "/usr/bin/python3", "-c", writer, log, fmt.Sprint(w))
		wc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		wc.Cancel = func() error { return syscall.Kill(-wc.Process.Pid, syscall.SIGKILL) }
		wc.Stdout = &writerOut[w]
		testkit.Must(t, wc.Start())
		readers = append(readers, wc) // reaped like the readers
	}
	stop := make(chan struct{})
	waitSenders := s.sendersUntil(2, stop, func(int) string { return "k" })
	time.Sleep(1500 * time.Millisecond)
	dead := s.crash() // SIGKILL, and no unmount by the harness
	close(stop)
	// The dead server's watchdog aborts its connections and detaches its
	// mounts at once (TestKill9NoCallerBlocked measures it): reading
	// fails with ENOTCONN or ECONNABORTED while a mount is still there,
	// and with ENOENT once it is gone. Without a watchdog, a server thread
	// that died in the middle of an invalidation would hang such readers
	// until the connection is aborted: the next mount frees them too.
	if n := mountsAt(s.mnt("home")); n > 1 {
		t.Errorf("after the kill: %d mounts at home, want the stale one or none", n)
	}
	probe := exec.Command("cat", log)
	probe.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var probeOut strings.Builder
	probe.Stdout, probe.Stderr = &probeOut, &probeOut
	testkit.Must(t, probe.Start())
	var probeErr error
	probeDone := make(chan struct{})
	go func() { probeErr = probe.Wait(); close(probeDone) }()
	select {
	case <-probeDone:
		out := probeOut.String()
		if err := probeErr; err == nil || !strings.Contains(out, "not connected") && !strings.Contains(out, "connection abort") && !strings.Contains(out, "No such file") {
			t.Errorf("after the kill, cat of the log: %v %q, want ENOTCONN, ECONNABORTED or ENOENT", err, out)
		}
	case <-time.After(2 * time.Second):
		t.Logf("after the kill, a read of the old mount hangs (connection not ended)")
	}

	s.start() // the next mount cleans up the stale mountpoints
	eventually(t, 10*time.Second, "one live mount each at home and shared", func() bool {
		return mountsAt(s.mnt("home")) == 1 && mountsAt(s.mnt("shared")) == 1
	})
	if !stopReaders() {
		t.Fatalf("readers and writers of the dead mount still hang after the next mount")
	}
	select {
	case <-probeDone:
	case <-time.After(10 * time.Second):
		t.Fatalf("a cat of the dead mount still hangs after the next mount")
	}
	for _, out := range writerOut {
		for _, tag := range strings.Fields(out.String()) {
			acked[tag] = true
		}
	}
	reaped(t, dead)
	// Writers blocked on the dead mount or socket are free now too.
	started := waitSenders(40 * time.Second)
	if len(acked) == 0 || len(started) == 0 {
		t.Fatalf("nothing acknowledged before the kill: %d appends, %d starts", len(acked), len(started))
	}
	s.mustRequest("coder", `{"op":"status","session":"k"}`) // loads (recovers) the session
	if out, code := s.fsck(); code != 0 {
		t.Fatalf("fsck after the kill: exit %d\n%s", code, out)
	}
	msgs := fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "k"), "messages.jsonl"))
	if got := s.readMnt(sessRel("k") + "/messages.jsonl"); got != msgs {
		t.Errorf("the new mount serves %d bytes, the store holds %d", len(got), len(msgs))
	}
	seen := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(msgs, "\n"), "\n") {
		var m struct{ Content any }
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("torn line %q", l)
		}
		if c, ok := m.Content.(string); ok {
			seen[c]++
		}
	}
	for tag := range acked {
		if seen[tag] != 1 {
			t.Errorf("acknowledged append %s recorded %d times", tag, seen[tag])
		}
	}
	eventsPath := filepath.Join(s.sessionDir(0, "coder", "k"), "events.jsonl")
	starts := recordedStarts(t, eventsPath)
	events := fileBytes(t, eventsPath)
	for run := range started {
		if starts[run] != 1 {
			t.Errorf("run %s: start frame received, recorded %d times", run, starts[run])
		}
	}
	if strings.Count(events, `"type":"start"`) != strings.Count(events, `"type":"done"`) {
		t.Errorf("%d starts, %d dones after recovery", strings.Count(events, `"type":"start"`), strings.Count(events, `"type":"done"`))
	}
	t.Logf("%d appends and %d starts acknowledged before the kill", len(acked), len(started))
}

// mountsAt counts the mounts listed at dir.
func mountsAt(dir string) int {
	b, _ := os.ReadFile("/proc/self/mounts")
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[1] == dir {
			n++
		}
	}
	return n
}
