package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestoreTooLargeRefusedFirst: a restore's calls carry the earlier
// contents and are recorded as one assistant message, one log line
// (SPEC 17). A restore whose contents cannot fit that line is EFBIG
// before anything is read or recorded: uid 1001's run changed 32 hard
// links of one 8 MiB file (one content in versions/, 32 lines), and
// `restore --run` read 32 copies of it, and their base64 twice over,
// into the server (its peak resident 1.5-2.1 GiB higher), to end EINVAL
// when its start was already recorded. Now no run starts, the files and
// logs are as they were, and the server's peak grows by less than 64 MiB.
func TestRestoreTooLargeRefusedFirst(t *testing.T) {
	const n = 32
	script := []func(w http.ResponseWriter, r *http.Request){
		openAICall("w0", "fs_write", `{"path":"seed","content":"seed\n"}`), openAIReply("seeded")}
	for i := 1; i <= n; i++ {
		script = append(script, openAICall(fmt.Sprintf("w%d", i), "fs_write", fmt.Sprintf(`{"path":"l%d","content":"x"}`, i)))
	}
	p := newFakeProvider(t, scripted(append(script, openAIReply("written"))...))
	s := newToolServer(t, p.URL+"/v1", map[string]string{"tools": "fs.write\n", "perm": "rw\n", "steps": "64\n"})
	if d := lastDone(waitRunDone(t, s.sendAsync(owner, "v", "seed"))); d == nil || d["status"] != "ok" {
		t.Fatalf("seed: %v", d)
	}
	dir := s.mnt("home/1001/agent/doer/root")
	links := fmt.Sprintf("cd %s && head -c 8388608 /dev/urandom > big && for i in $(seq 1 %d); do ln big l$i; done", dir, n)
	if out, err := runCmd(t, owner, nil, "sh", "-c", links); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	frames := waitRunDone(t, s.sendAsync(owner, "v", "overwrite the links"))
	if d := lastDone(frames); d == nil || d["status"] != "ok" {
		t.Fatalf("run: %v", frames)
	}
	run := frames[0]["run"].(string)
	msgs := filepath.Join(s.sessionDir(1001, "doer", "v"), "messages.jsonl")
	before := fileBytes(t, msgs)
	pid := s.cmd.Process.Pid
	peak := vmKB(t, pid, "VmHWM")
	frames, raw, err := s.requestAs(owner, "doer", fmt.Sprintf(`{"op":"restore","id":"x1","session":"v","run":%q}`, run))
	grew := (vmKB(t, pid, "VmHWM") - peak) / 1024
	t.Logf("restore: %d MiB more at peak; %.300s", grew, raw)
	if err != nil || len(frames) == 0 {
		t.Fatalf("restore: %v %s", err, raw)
	}
	wantCode(t, frames[0], "EFBIG")
	if grew >= 64 {
		t.Errorf("the refused restore took the server's peak up by %d MiB", grew)
	}
	if after := fileBytes(t, msgs); after != before {
		t.Errorf("the refused restore recorded %d bytes in messages.jsonl", len(after)-len(before))
	}
	if b, _ := os.ReadFile(filepath.Join(s.store, "home", "1001", "agent", "doer", "root", "l1")); string(b) != "x" {
		t.Errorf("l1 holds %d bytes, want the run's x", len(b))
	}
	if strings.Contains(raw, `"type":"start"`) {
		t.Errorf("a run started")
	}
}
