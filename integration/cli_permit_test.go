package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Claude Code's permission prompts under `approval ask` (SPEC 17): the
// real server runs the real Claude Code against aimock as uid 1001; the
// model asks for a Bash command that needs permission, Claude asks its
// permission prompt tool (`ctxfs __permit`, over MCP), which asks the
// run's control socket, and the call waits for a person's approve like a
// built-in tool's.

// newPermitServer starts a server whose agent "cli" is Claude Code with
// approval ask (plus extra control files), its root/ made by uid 1001.
func newPermitServer(t *testing.T, extra map[string]string) (*server, string) {
	t.Helper()
	base := cliSimulator(t)
	c := cliCases[0]
	bin := filepath.Join(cliNPM, ".bin", c.program)
	needCLI(t, bin)
	files := cliDefinition(c, base)
	files["approval"] = "ask\n"
	for k, v := range extra {
		files[k] = v
	}
	if files["program"] == "" {
		files["program"] = "#!/bin/sh\nexec " + bin + " \"$@\"\n"
	}
	s := newFuseServerWith(t, func(s *server) {
		s.env = append(s.env, "CTXFS_CLI_KEY="+cliKey("permit"))
		s.define("cli", files)
	})
	root := s.mnt("home/1001/agent/cli/root")
	if out, err := bashAs(t, owner, "mkdir -p "+root); err != nil {
		t.Fatalf("mkdir root/: %v %s", err, out)
	}
	return s, root
}

// sendCLIAsync sends input as the owner to agent cli's session; the
// channel gets the frames once the run is done.
func (s *server) sendCLIAsync(session, input string) <-chan []frame {
	return s.sendAsyncTo(owner, "cli", session, input, 3*time.Minute)
}

// cliPending polls the op pending on agent cli as the owner until it
// lists one call, and returns it.
func (s *server) cliPending(t *testing.T) frame {
	t.Helper()
	var call frame
	eventually(t, 2*time.Minute, "a pending call", func() bool {
		frames, _, err := s.requestAs(owner, "cli", `{"op":"pending"}`)
		if err != nil || len(frames) != 2 || frames[1]["type"] != "pending_end" {
			return false
		}
		call = frames[0]
		return true
	})
	return call
}

// cliAnswer sends an approve line as the owner and returns its one frame.
func (s *server) cliAnswer(t *testing.T, line string) frame {
	t.Helper()
	frames, raw, err := s.requestAs(owner, "cli", line)
	if err != nil || len(frames) != 1 {
		t.Fatalf("%s: %v %q", line, err, raw)
	}
	return frames[0]
}

// controlSocketOf finds the waiting run's Claude Code (a process of uid
// with CTX_CONTROL_SOCKET in its environment) and returns its pid and
// that path as the process sees it.
func controlSocketOf(t *testing.T, s *server, uid int) (int, string) {
	t.Helper()
	for _, pid := range uidProcesses(uid) {
		if !descendsFrom(pid, s.cmd.Process.Pid) {
			continue // another test's, or another server's
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("CTX_CONTROL_SOCKET=")); ok {
				return pid, string(v)
			}
		}
	}
	t.Fatal("no process of the run names its control socket")
	return 0, ""
}

// TestClaudePermit: a tool use of Claude Code under approval ask waits
// (pending lists it, status shows phase approval); neither another uid
// (EACCES at connect: the socket is the run uid's, mode 0600) nor a
// process of the run's own uid outside its process tree (refused EACCES)
// can use the run's control socket, and neither records anything;
// allow_once lets the command run and the run end ok; deny keeps it from
// running, Claude gets the refusal and the run still ends ok. Both
// decisions are recorded as approval_request and approval_result, and
// the control socket is gone with its run.
func TestClaudePermit(t *testing.T) {
	s, root := newPermitServer(t, nil)
	checkClaudePermit(t, s, root, false)
	checkClaudeAllowRunAndStop(t, s, root)
}

// checkClaudeAllowRunAndStop: allow_run lets the call and the run's later
// calls of the same tool run, the later ones without asking (one
// approval_request in the run); stop refuses the call and ends the run
// done cancelled.
func checkClaudeAllowRunAndStop(t *testing.T, s *server, root string) {
	done := s.sendCLIAsync("twice", "ctxfs-permit-twice-claude")
	call := s.cliPending(t)
	run := call["run"].(string)
	if call["id"] != "toolu_ctxfs_twice1" {
		t.Fatalf("pending call %v", call)
	}
	s.cliAnswer(t, fmt.Sprintf(`{"op":"approve","run":%q,"id":"toolu_ctxfs_twice1","decision":"allow_run"}`, run))
	if got := frameTypes(waitRunDone(t, done)); !strings.HasSuffix(got, "done ok") {
		t.Fatalf("allow_run: %s", got)
	}
	for _, f := range []string{"first.txt", "second.txt"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("after allow_run: %v", err)
		}
	}
	ev := fileBytes(t, filepath.Join(s.sessionDir(1001, "cli", "twice"), "events.jsonl"))
	if n := strings.Count(ev, `"type":"approval_request"`); n != 1 {
		t.Errorf("allow_run: %d approval requests, want 1:\n%s", n, ev)
	}

	done = s.sendCLIAsync("stop", "ctxfs-refuse-claude")
	run = s.cliPending(t)["run"].(string)
	s.cliAnswer(t, fmt.Sprintf(`{"op":"approve","run":%q,"id":"toolu_ctxfs_refuse1","decision":"stop"}`, run))
	if got := frameTypes(waitRunDone(t, done)); !strings.HasSuffix(got, "done cancelled") {
		t.Errorf("stop: %s", got)
	}
	if _, err := os.Stat(filepath.Join(root, "refused.txt")); err == nil {
		t.Error("the stopped command ran")
	}
	wantApprovalRecords(t, s, "stop", run, "toolu_ctxfs_refuse1", "stop")
}

// TestClaudePermitChroot: the same with isolation chroot: the control
// socket and the ctxfs binary are bound into the jail; a process of the
// run's uid outside the jail reaches the socket through the jailed
// Claude's /proc/PID/root and is refused EACCES (another PID namespace).
func TestClaudePermitChroot(t *testing.T) {
	s, root := newPermitChrootServer(t)
	checkClaudePermit(t, s, root, true)
}

// newPermitChrootServer starts a server whose agent "cli" is Claude Code
// under approval ask in a chroot jail (busybox, node and bash in uid
// 1001's root/), and returns root/ through the mount.
func newPermitChrootServer(t *testing.T) (*server, string) {
	bin := filepath.Join(cliNPM, ".bin", "claude")
	needCLI(t, bin)
	exRequireBusybox(t)
	base := cliSimulator(t)
	s := newFuseServerWith(t, func(s *server) { s.env = append(s.env, "CTXFS_CLI_KEY="+cliKey("permit-chroot")) })
	args := []string{"cli", "--cli", "claude-code", "--path", bin, "--endpoint", base, "--api-key-env", "CTXFS_CLI_KEY", "--isolation", "chroot"}
	if out, code := ctxAdd(t, s, nil, "/usr/bin:/bin", args...); code != 0 {
		t.Fatalf("ctx agent add: exit %d\n%s", code, out)
	}
	// Claude Code's Bash tool wants bash (or zsh), named by SHELL.
	for name, v := range map[string]string{"approval": "ask\n", "env": "SHELL=/bin/bash\n"} {
		if err := os.WriteFile(filepath.Join(s.root, "agent", "cli.d", name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exMustScript(t, "cli-agent/prepare-root.sh", "--root", s.root, "--cli", "claude-code", "1001", "cli")
	root := s.mnt("home/1001/agent/cli/root")
	if out, err := bashAs(t, owner, "set -e; cp /bin/bash "+root+"/bin/; for l in $(ldd /bin/bash | grep -o '/lib[^ ]*'); do mkdir -p "+root+"$(dirname $l); cp -L $l "+root+"$l; done"); err != nil {
		t.Fatalf("bash into root/: %v %s", err, out)
	}
	return s, root
}

// TestClaudePermitKeepsEdits: before Claude Code may edit a file under
// approval ask, the server keeps the file as it is in the session's
// versions (SPEC 17: a CLI's edit), as the run's uid in its jail; the
// edit runs once allowed, and a restore of that version puts the earlier
// content back.
func TestClaudePermitKeepsEdits(t *testing.T) {
	s, root := newPermitChrootServer(t)
	if out, err := bashAs(t, owner, "echo old > "+root+"/notes.txt"); err != nil {
		t.Fatalf("notes.txt: %v %s", err, out)
	}
	done := s.sendCLIAsync("edit", "ctxfs-permit-edit-claude")
	call := s.cliPending(t)
	if call["name"] != "Edit" {
		t.Fatalf("pending %v", call)
	}
	index := s.mnt("home/1001/agent/cli/session/edit/versions/index.jsonl")
	kept, err := runCmd(t, owner, nil, "cat", index)
	if err != nil || !strings.Contains(kept, `"v":1,`) || !strings.Contains(kept, `"call":"toolu_ctxfs_edit2","path":"/notes.txt","action":"modify"`) {
		t.Fatalf("versions before the answer: %v\n%s", err, kept)
	}
	s.cliAnswer(t, fmt.Sprintf(`{"op":"approve","run":%q,"id":"toolu_ctxfs_edit2","decision":"allow_once"}`, call["run"]))
	if got := frameTypes(waitRunDone(t, done)); !strings.HasSuffix(got, "done ok") {
		t.Fatalf("edit run: %s", got)
	}
	if got := fileBytes(t, filepath.Join(root, "notes.txt")); got != "new\n" {
		t.Fatalf("notes.txt after the edit: %q", got)
	}
	// The restore is a run of the agent's own: under approval ask, its
	// write waits for a person too.
	restored := make(chan []frame, 1)
	go func() {
		frames, _, _ := s.requestAsWithin(owner, "cli", `{"op":"restore","id":"r1","session":"edit","version":1}`, time.Minute)
		restored <- frames
	}()
	call = s.cliPending(t)
	if call["name"] != "fs.write" || call["id"] != "restore-1" {
		t.Fatalf("the restore's pending call %v", call)
	}
	s.cliAnswer(t, fmt.Sprintf(`{"op":"approve","run":%q,"id":"restore-1","decision":"allow_once"}`, call["run"]))
	if d := lastDone(waitRunDone(t, restored)); d == nil || d["status"] != "ok" {
		t.Fatalf("restore: %v", d)
	}
	if got := fileBytes(t, filepath.Join(root, "notes.txt")); got != "old\n" {
		t.Fatalf("notes.txt after the restore: %q", got)
	}
}

// checkClaudePermit is TestClaudePermit's sends and checks, on s's agent
// cli with its root/ at root; jailed says the run is.
func checkClaudePermit(t *testing.T, s *server, root string, jailed bool) {

	done := s.sendCLIAsync("allow", "ctxfs-permit-claude")
	call := s.cliPending(t)
	if call["kind"] != "approval" || call["name"] != "Bash" || call["id"] != "toolu_ctxfs_permit1" || call["session"] != "allow" {
		t.Fatalf("pending call %v", call)
	}
	args, _ := call["arguments"].(map[string]any)
	if args["command"] != "touch permitted.txt" {
		t.Errorf("pending call's arguments %v", call["arguments"])
	}
	run := call["run"].(string)
	st := s.cliAnswer(t, `{"op":"status","session":"allow"}`)
	if runs, _ := st["runs"].([]any); len(runs) != 1 || runs[0].(map[string]any)["phase"] != "approval" {
		t.Errorf("status while waiting: %v", st)
	}
	if _, err := os.Stat(filepath.Join(root, "permitted.txt")); err == nil {
		t.Fatal("the command ran before it was approved")
	}
	socket := checkControlRefusals(t, s, "allow", jailed)

	res := s.cliAnswer(t, fmt.Sprintf(`{"op":"approve","run":%q,"id":"toolu_ctxfs_permit1","decision":"allow_once"}`, run))
	if res["type"] != "approval_result" || res["decision"] != "allow_once" || res["uid"] != float64(1001) {
		t.Fatalf("approve reply %v", res)
	}
	frames := waitRunDone(t, done)
	if got := frameTypes(frames); !strings.HasSuffix(got, "done ok") || !strings.Contains(got, "tool_result") {
		t.Fatalf("allowed run: %s\n%v", got, frames)
	}
	if st, err := os.Stat(filepath.Join(root, "permitted.txt")); err != nil || fileUID(st) != 1001 {
		t.Errorf("the allowed command's file: %v", err)
	}
	for _, f := range frames {
		if f["type"] == "tool_result" && f["is_error"] != false {
			t.Errorf("the allowed call's result: %v", f)
		}
	}
	wantApprovalRecords(t, s, "allow", run, "toolu_ctxfs_permit1", "allow_once")

	done = s.sendCLIAsync("refuse", "ctxfs-refuse-claude")
	call = s.cliPending(t)
	run = call["run"].(string)
	s.cliAnswer(t, fmt.Sprintf(`{"op":"approve","run":%q,"id":"toolu_ctxfs_refuse1","decision":"deny","reason":"not here"}`, run))
	frames = waitRunDone(t, done)
	if got := frameTypes(frames); !strings.HasSuffix(got, "done ok") {
		t.Fatalf("denied run: %s\n%v", got, frames)
	}
	if _, err := os.Stat(filepath.Join(root, "refused.txt")); err == nil {
		t.Error("the denied command ran")
	}
	refused := false
	for _, f := range frames {
		if f["type"] == "tool_result" && f["is_error"] == true && strings.Contains(fmt.Sprint(f["content"]), "denied: not here") {
			refused = true
		}
	}
	if !refused {
		t.Errorf("Claude did not get the refusal: %v", frames)
	}
	wantApprovalRecords(t, s, "refuse", run, "toolu_ctxfs_refuse1", "deny")
	if _, err := os.Lstat(filepath.Dir(socket)); !jailed && !os.IsNotExist(err) {
		t.Errorf("the control socket's directory %s after its run: %v", filepath.Dir(socket), err)
	}
}

// checkControlRefusals: while session's call waits, uid 1002 cannot
// connect to the run's control socket (EACCES), and a process of uid
// 1001 (the run's) that is not the run's own is refused EACCES; neither
// adds a line to events.jsonl nor a pending call. A jailed run's socket
// is reached through its Claude's /proc/PID/root. It returns the socket's
// path as the run sees it.
func checkControlRefusals(t *testing.T, s *server, session string, jailed bool) string {
	t.Helper()
	pid, socket := controlSocketOf(t, s, 1001)
	reach := socket
	if jailed {
		reach = fmt.Sprintf("/proc/%d/root%s", pid, socket)
	}
	events := filepath.Join(s.sessionDir(1001, "cli", session), "events.jsonl")
	before := fileBytes(t, events)
	forged := `{"op":"permit","id":"toolu_forged","name":"Bash","arguments":{"command":"touch forged.txt"}}`
	out, err := runCmd(t, &cred{uid: 1002, gid: 1002}, nil, "/usr/bin/python3", "-c", sockRequest, reach, forged)
	if err == nil || !strings.Contains(out, "[Errno 13]") {
		t.Errorf("uid 1002 on the run's control socket: %v %s", err, out)
	}
	out, err = runCmd(t, owner, nil, "/usr/bin/python3", "-c", sockRequest, reach, forged)
	if err != nil || !strings.Contains(out, `"type":"error"`) || !strings.Contains(out, `"code":"EACCES"`) {
		t.Errorf("uid 1001 outside the run on its control socket: %v %s", err, out)
	}
	if after := fileBytes(t, events); after != before {
		t.Errorf("refused control requests wrote:\n%s", strings.TrimPrefix(after, before))
	}
	if frames, _, _ := s.requestAs(owner, "cli", `{"op":"pending"}`); len(frames) != 2 {
		t.Errorf("pending after the refused requests: %v", frames)
	}
	return socket
}

// wantApprovalRecords checks events.jsonl for the call's approval_request
// and its approval_result with decision.
func wantApprovalRecords(t *testing.T, s *server, session, run, id, decision string) {
	t.Helper()
	ev := fileBytes(t, filepath.Join(s.sessionDir(1001, "cli", session), "events.jsonl"))
	for _, want := range []string{
		`"type":"approval_request","run":"` + run + `","id":"` + id + `","name":"Bash"`,
		`"type":"approval_result","run":"` + run + `","id":"` + id + `","name":"Bash","decision":"` + decision + `","uid":1001`,
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("events.jsonl lacks %s:\n%s", want, ev)
		}
	}
}

// fileUID is the owner of what st describes.
func fileUID(st os.FileInfo) int { return int(st.Sys().(*syscall.Stat_t).Uid) }

// TestClaudePermitRestart: a CLI's process dies with the server, and its
// permission prompt with it, so a Claude Code run waiting for an answer
// when the server is killed is not kept waiting: the restart closes it as
// interrupted (EINTR), and no call is pending.
func TestClaudePermitRestart(t *testing.T) {
	s, _ := newPermitServer(t, nil)
	done := s.sendCLIAsync("killed", "ctxfs-permit-claude")
	run := s.cliPending(t)["run"].(string)
	s.restart(syscall.SIGKILL)
	<-done
	frames, _, err := s.requestAs(owner, "cli", `{"op":"pending"}`)
	if err != nil || len(frames) != 1 || frames[0]["type"] != "pending_end" {
		t.Fatalf("pending after the restart: %v %v", frames, err)
	}
	ev := fileBytes(t, filepath.Join(s.sessionDir(1001, "cli", "killed"), "events.jsonl"))
	if !strings.Contains(ev, `"type":"done","run":"`+run+`","status":"error","interrupted":true`) {
		t.Fatalf("events.jsonl:\n%s", ev)
	}
}
