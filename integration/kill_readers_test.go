package integration

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/mountlife"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// killRounds is how many times TestKill9NoCallerBlocked kills a server: a
// server thread gets stuck in the kernel only when the kill lands while an
// invalidation waits on a page a reader holds, so one kill may not hit it.
const killRounds = 5

// blockLimit is how long any caller of a killed server's mount may stay
// blocked.
const blockLimit = 2 * time.Second

// TestKill9NoCallerBlocked: readers in the middle of reads (`tail -f` and
// loops of cat on a log) and a writer through the mount while the server
// appends (socket sends), then kill -9 of the server. Every caller is free
// within blockLimit (each is SIGKILLed at the kill, and a fresh cat is
// started: the time until each is gone is measured), the mounts are gone or
// answer ENOTCONN without anyone running `ctxfs mount` again, the server
// and its watchdog are gone. The next server then starts on the same root.
func TestKill9NoCallerBlocked(t *testing.T) {
	s := newFuseServer(t)
	keepFusectlAsIs(t)
	umountLeftovers(t, s.root)
	t.Cleanup(func() { // never leave a dead connection behind
		mountlife.AbortDead(s.mnt("home"))
		mountlife.AbortDead(s.mnt("shared"))
	})
	var worst time.Duration
	var waiting []string
	for round := 0; round < killRounds; round++ {
		if round > 0 {
			s.start()
		}
		took := killWithReaders(t, s, round)
		if took > worst {
			worst = took
		}
		waiting = append(waiting, abortedWaiting(s.logText())...)
	}
	t.Logf("%d kills: the longest any caller, the server or its watchdog stayed was %v; requests waiting on each connection the watchdog aborted: %v",
		killRounds, worst.Round(time.Millisecond), waiting)
}

// abortedWaiting reads, from a server log, how many requests were waiting
// on each connection its watchdog aborted: more than 0 means that the
// killed server still held its connection (a thread stuck in the kernel).
func abortedWaiting(log string) []string {
	var n []string
	for _, m := range regexp.MustCompile(`aborted the connection of \S+ \((\d+) requests waiting\)`).FindAllStringSubmatch(log, -1) {
		n = append(n, m[1])
	}
	return n
}

// killWithReaders runs one round and returns the longest time anything
// (caller, server, watchdog) took to be gone after the kill.
func killWithReaders(t *testing.T, s *server, round int) time.Duration {
	t.Helper()
	session := fmt.Sprintf("k%d", round)
	s.send(session, fmt.Sprintf("r%d", round), "before the kill")
	log := s.mnt(sessRel(session) + "/messages.jsonl")
	var callers []*proc
	callers = append(callers, startProc(t, "tail", "-s", "0.1", "-f", log))
	for i := 0; i < 4; i++ {
		callers = append(callers, startProc(t, "/bin/bash", "-c", "while :; do cat "+log+" >/dev/null 2>&1; done"))
	}
	callers = append(callers, startProc(t, "/bin/bash", "-c",
		`i=0; while :; do echo "{\"role\":\"user\",\"content\":\"w$i\"}" >> `+log+` || exit 0; i=$((i+1)); done`))
	stop := make(chan struct{})
	waitSenders := s.sendersUntil(2, stop, func(int) string { return session })
	time.Sleep(time.Second)

	server := s.cmd.Process.Pid
	watchdog := watchdogOf(server)
	if watchdog == 0 {
		t.Fatalf("round %d: server %d has no watchdog", round, server)
	}
	start := time.Now()
	s.crash()
	for _, c := range callers {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
	fresh := exec.Command("cat", log)
	fresh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	freshOut := &strings.Builder{}
	fresh.Stdout, fresh.Stderr = freshOut, freshOut
	testkit.Must(t, fresh.Start())
	t.Cleanup(func() { syscall.Kill(-fresh.Process.Pid, syscall.SIGKILL); fresh.Wait() })

	gone := map[string]int{"server": server, "watchdog": watchdog, "fresh cat": fresh.Process.Pid}
	for i, c := range callers {
		gone[fmt.Sprintf("caller %d (%s)", i, c.Args[0])] = c.Process.Pid
	}
	var worst time.Duration
	for what, pid := range gone {
		took, ok := timeGone(pid, start, blockLimit)
		if !ok {
			t.Errorf("round %d: %s (pid %d) still there %v after the kill", round, what, pid, blockLimit)
		}
		if took > worst {
			worst = took
		}
	}
	if t.Failed() { // free what hangs, so that the test fails instead
		mountlife.AbortDead(s.mnt("home"))
		mountlife.AbortDead(s.mnt("shared"))
	}
	fresh.Wait()
	if out := freshOut.String(); !strings.Contains(out, "not connected") && !strings.Contains(out, "connection abort") && !strings.Contains(out, "No such file") {
		t.Errorf("round %d: a cat of the dead mount: %q, want ENOTCONN, ECONNABORTED or no mount", round, out)
	}
	for _, d := range []string{"home", "shared"} {
		wantDeadMountGone(t, s.mnt(d), round)
	}
	close(stop)
	waitSenders(30 * time.Second)
	t.Logf("round %d: everything gone %v after the kill", round, worst.Round(time.Millisecond))
	return worst
}

// wantDeadMountGone checks that the dead server's mount at dir is gone or
// answers ENOTCONN (never hangs).
func wantDeadMountGone(t *testing.T, dir string, round int) {
	t.Helper()
	if mountsAt(dir) == 0 {
		return
	}
	done := make(chan error, 1)
	go func() { _, err := os.ReadDir(dir); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
			t.Errorf("round %d: %s still mounted and answers %v", round, dir, err)
		}
	case <-time.After(blockLimit):
		t.Errorf("round %d: %s still mounted and hangs", round, dir)
	}
}
