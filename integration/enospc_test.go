package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// smallTmpfs mounts a tmpfs of size (mount(8)'s size=) for a store, and
// returns where; it is unmounted lazily at cleanup, after the server
// stops (cleanups run last first).
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	base := t.TempDir()
	os.Chmod(base, 0o755)
	tmpfs := filepath.Join(base, "small")
	testkit.Must(t, os.Mkdir(tmpfs, 0o700))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", tmpfs).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", tmpfs).Run() })
	return tmpfs
}

// TestFullDisk: a store on a small tmpfs, filled until sends and appends
// through the mount are refused with ENOSPC. A refused send leaves the
// session's files as they were; no client ever gets a frame that is not recorded (every frame
// but deltas is in events.jsonl); a refused append fails its write or its
// close with ENOSPC; the logs end in whole lines and fsck is clean; once
// space is freed, sends work again.
func TestFullDisk(t *testing.T) {
	requireFUSE(t)
	tmpfs := smallTmpfs(t, "3m")
	s := newServerWith(t, func(s *server) {
		s.store = filepath.Join(tmpfs, "store")
		// An agent whose answer is larger than the room left.
		s.define("big", map[string]string{"abi": "jsonl",
			"program": "#!/bin/sh\nprintf '{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"%0200000d\"}\\n' 0\n"})
	})
	openToAll(t, s.root)
	s.send("full", "warm", "first")
	s.mustRequest("big", `{"op":"send","id":"warm","session":"full","input":"first"}`)
	// Fill the disk but for a little, with a file that is not the store's.
	filler := filepath.Join(tmpfs, "filler")
	var st syscall.Statfs_t
	testkit.Must(t, syscall.Statfs(tmpfs, &st))
	testkit.Must(t, os.WriteFile(filler, make([]byte, int64(st.Bavail)*st.Bsize-64<<10), 0o600))

	// A run whose start fits and whose answer does not: it ends with its
	// error and done error recorded, and its client gets nothing else.
	bigDir := filepath.Join(s.store, "home/0/agent/big/session/full")
	frames, err := s.request("big", `{"op":"send","id":"b1","session":"full","input":"answer big"}`)
	if err != nil || frames[0]["type"] != "start" {
		t.Fatalf("the big answer's send: %v %v", err, frames)
	}
	everyFrameRecorded(t, frames, filepath.Join(bigDir, "events.jsonl"))
	if last := frames[len(frames)-1]; last["status"] != "error" || !hasCode(frames, "ENOSPC") {
		t.Fatalf("a run whose answer does not fit: %v", frames)
	}
	// Served at once, although the disk may have no room for the file:
	// the logs say so. The store's file follows once there is room.
	if got := s.stateOf("big", "full"); got != "error" {
		t.Fatalf("state %q through the mount after a run that could not be recorded, want error", got)
	}

	input := strings.Repeat("z", 20<<10)
	refused, failedRuns := 0, 0
	for i := 0; i < 20; i++ {
		dir := s.sessionDir(0, "coder", "full")
		before := contents(t, dir)
		frames, err := s.request("coder", fmt.Sprintf(`{"op":"send","id":"f%d","session":"full","input":%q}`, i, input))
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if frames[0]["type"] == "error" {
			if frames[0]["code"] != "ENOSPC" {
				t.Fatalf("send %d refused with %v, want ENOSPC", i, frames[0])
			}
			testkit.Same(t, "a send refused on a full disk", before, contents(t, dir))
			refused++
			continue
		}
		everyFrameRecorded(t, frames, filepath.Join(dir, "events.jsonl"))
		if last := frames[len(frames)-1]; last["status"] != "ok" {
			failedRuns++
		}
	}
	t.Logf("%d sends refused, %d runs ended in error on the full disk", refused, failedRuns)
	if refused == 0 {
		t.Fatal("no send was refused on a full disk")
	}
	// An append through the mount on the full disk: refused at the write
	// or at the close, with ENOSPC, and nothing of it in the log.
	logPath := s.mnt(sessRel("full") + "/messages.jsonl")
	msgs := fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "full"), "messages.jsonl"))
	err = appendMnt(logPath, `{"role":"user","content":"`+strings.Repeat("a", 200<<10)+`"}`+"\n")
	testkit.WantErrno(t, "an append on a full disk", err, syscall.ENOSPC)
	if got := fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "full"), "messages.jsonl")); got != msgs {
		t.Fatal("a refused append reached the log")
	}
	// Space again: sends work, and the store proves its history.
	testkit.Must(t, os.Remove(filler))
	frames = s.mustRequest("coder", `{"op":"send","id":"after","session":"full","input":"room again"}`)
	if last := frames[len(frames)-1]; last["type"] != "done" || last["status"] != "ok" {
		t.Fatalf("a send after space was freed: %v", frames)
	}
	eventually(t, 5*time.Second, "the big run's state in the store once there is room (written again)", func() bool {
		return fileBytes(t, filepath.Join(bigDir, "state")) == "error\n"
	})
	if out, code := s.fsck(); code != 0 {
		t.Fatalf("fsck after a full disk: exit %d\n%s", code, out)
	}
}

// contents is every file of a session directory but its seals, by
// content: a write that fails on a full disk is taken back, so the history
// is as it was, though the files' times, and the seal that vouches for the
// same content, may have moved.
func contents(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range mustReadDir(t, dir) {
		if _, _, derived := derivedFile(filepath.Join(dir, e.Name())); derived {
			continue // written behind, up to a second after the send that changed it (storeSnapshot)
		}
		if e.Type().IsRegular() {
			out[e.Name()] = fileBytes(t, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

func mustReadDir(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	ents, err := os.ReadDir(dir)
	testkit.Must(t, err)
	return ents
}

// hasCode reports whether an error frame with code is among frames.
func hasCode(frames []frame, code string) bool {
	for _, f := range frames {
		if f["type"] == "error" && f["code"] == code {
			return true
		}
	}
	return false
}

// everyFrameRecorded fails unless every frame of a reply but deltas is a
// line of events.jsonl (the same JSON object), and the reply ends in done.
func everyFrameRecorded(t *testing.T, frames []frame, events string) {
	t.Helper()
	recorded := map[string]bool{}
	for _, l := range strings.Split(fileBytes(t, events), "\n") {
		var o map[string]any
		if json.Unmarshal([]byte(l), &o) == nil {
			b, _ := json.Marshal(o)
			recorded[string(b)] = true
		}
	}
	for _, f := range frames {
		if f["type"] == "delta" {
			continue
		}
		b, _ := json.Marshal(f)
		if !recorded[string(b)] {
			t.Fatalf("a client got a frame that is not recorded: %s", b)
		}
	}
	if last := frames[len(frames)-1]; last["type"] != "done" {
		t.Fatalf("a reply that does not end in done: %v", last)
	}
}

// TestFullDiskKeepsTheSessionBound: a server with 128 descriptors keeps
// at most 16 sessions loaded; on a full disk, sends to 44 sessions whose
// derived files cannot be written (their spare twins are gone, so each
// needs a block) all succeed, and the server's descriptors stay within
// what it held plus the 16 sessions': a session whose value waits leaves
// the cache like any other. The values are served through the mount
// meanwhile and land in the store once there is room.
func TestFullDiskKeepsTheSessionBound(t *testing.T) {
	requireFUSE(t)
	tmpfs := smallTmpfs(t, "32m")
	s := newServerWith(t, func(s *server) {
		s.store = filepath.Join(tmpfs, "store")
		s.wrap = []string{"prlimit", "--nofile=128:128"} // quota.SessionBudget: 16
	})
	const n, bound = 44, 16 // the journal's room (1 MiB) takes about 55 sends
	for i := 0; i < n; i++ {
		s.send(fmt.Sprintf("s%d", i), fmt.Sprintf("a%d", i), "hi")
	}
	s.kill(s.cmd, syscall.SIGTERM)
	spares, _ := filepath.Glob(filepath.Join(s.store, "home/0/agent/coder/session/s*/.*.spare"))
	for _, p := range spares {
		testkit.Must(t, os.Remove(p))
	}
	s.start()
	s.send("warm", "w", "warm") // the journal's room, written ahead
	pid := s.cmd.Process.Pid
	fds := func() int { ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); return len(ents) }
	before := fds()
	filler := filepath.Join(tmpfs, "filler")
	f, err := os.Create(filler)
	testkit.Must(t, err)
	for buf := make([]byte, 64<<10); len(buf) > 0; {
		if _, err := f.Write(buf); err != nil {
			buf = buf[:len(buf)/2]
		}
	}
	f.Close()
	for i := 0; i < n; i++ {
		frames := s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":"b%d","session":"s%d","input":"full %d"}`, i, i, i))
		if last := frames[len(frames)-1]; last["type"] != "done" || last["status"] != "ok" {
			t.Fatalf("send %d on the full disk: %v", i, frames)
		}
		if got := fds(); got > before+bound*4 {
			t.Fatalf("after %d sends on the full disk the server holds %d descriptors, %d before; the sessions' bound is %d", i+1, got, before, bound*4)
		}
	}
	latest := func(i int) string {
		return filepath.Join("home/0/agent/coder/session", fmt.Sprintf("s%d", i), "latest.md")
	}
	for i := 0; i < n; i++ {
		if got := readFileMaybe(s.mnt(latest(i))); got != fmt.Sprintf("full %d\n", i) {
			t.Fatalf("s%d/latest.md through the mount on the full disk: %q", i, got)
		}
	}
	if got := readFileMaybe(filepath.Join(s.store, latest(0))); got != "hi\n" {
		t.Fatalf("s0/latest.md in the store on the full disk: %q", got)
	}
	testkit.Must(t, os.Remove(filler))
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < n; i++ {
		for readFileMaybe(filepath.Join(s.store, latest(i))) != fmt.Sprintf("full %d\n", i) {
			if time.Now().After(deadline) {
				t.Fatalf("s%d/latest.md in the store once there is room: %q", i, readFileMaybe(filepath.Join(s.store, latest(i))))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
