package fs

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

func TestTreeLookups(t *testing.T) {
	v := mountEnv(t)
	st, err := os.Stat(v.p("home/0"))
	testkit.Must(t, err)
	if st.Mode().Perm() != 0o700 || !st.IsDir() {
		t.Errorf("home mode %v", st.Mode())
	}
	v.session()
	for _, dir := range []string{agentRel + "/root", agentRel + "/session", sessRel + "/context"} {
		if st, err := os.Stat(v.p(dir)); err != nil || !st.IsDir() {
			t.Errorf("%s: %v", dir, err)
		}
	}
	ents, err := os.ReadDir(v.p(sessRel))
	testkit.Must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	for _, want := range []string{"messages.jsonl", "events.jsonl", "latest.md", "state", "cwd", "created_at", "updated_at", "meta.json", "context", "ctl"} {
		if !slices.Contains(names, want) {
			t.Errorf("session dir lacks %s: %v", want, names)
		}
	}
	for _, n := range names {
		if strings.HasPrefix(n, ".") {
			t.Errorf("hidden store name %s listed", n)
		}
	}
	_, err = os.Stat(v.p(sessRel + "/.seal"))
	testkit.WantErrno(t, "stat .seal", err, syscall.ENOENT)
	if got := v.read(sessRel + "/state"); got != "idle\n" {
		t.Errorf("state = %q", got)
	}
	st, err = os.Stat(v.p(sessRel + "/latest.md"))
	testkit.Must(t, err)
	if st.Mode().Perm() != 0o400 {
		t.Errorf("latest.md mode %v, want read-only 0400", st.Mode())
	}
	idx, err := os.ReadDir(v.p(agentRel + "/session/index"))
	testkit.Must(t, err)
	names = nil
	for _, e := range idx {
		names = append(names, e.Name())
	}
	for _, want := range []string{"list", "by-cwd", "by-hash", "by-uuid"} {
		if !slices.Contains(names, want) {
			t.Errorf("index lacks %s: %v", want, names)
		}
	}
	if got := v.read(agentRel + "/session/index/list"); got != "s1\n" {
		t.Errorf("index/list = %q", got)
	}
}

func TestOnlyABINames(t *testing.T) {
	v := mountEnv(t)
	v.session()
	testkit.WantErrno(t, "mkdir home/0/history", os.Mkdir(v.p("home/0/history"), 0o700), syscall.EPERM)
	testkit.WantErrno(t, "mkdir home/0/memory", os.Mkdir(v.p("home/0/memory"), 0o700), syscall.EPERM)
	testkit.WantErrno(t, "mkdir bad session name", os.Mkdir(v.p(agentRel+"/session/bad name"), 0o700), syscall.EINVAL)
	testkit.WantErrno(t, "mkdir agent/x.sock", os.Mkdir(v.p("home/0/agent/x.sock"), 0o700), syscall.EINVAL)
	_, err := os.Create(v.p(sessRel + "/notes.txt"))
	testkit.WantErrno(t, "create notes.txt", err, syscall.EPERM)
	_, err = os.Create(v.p(agentRel + "/notes.txt"))
	testkit.WantErrno(t, "create agent/notes.txt", err, syscall.EPERM)
	_, err = os.Create(v.p(agentRel + "/session/index/by-cwd/cwd-0123456789abcdef"))
	testkit.WantErrno(t, "create by-cwd entry", err, syscall.EPERM)
	testkit.WantErrno(t, "mkdir existing session", os.Mkdir(v.p(sessRel), 0o700), syscall.EEXIST)
}

func TestABIEntriesStay(t *testing.T) {
	v := mountEnv(t)
	v.session()
	for _, f := range []string{"messages.jsonl", "state", "latest.md", "ctl"} {
		testkit.WantErrno(t, "unlink "+f, os.Remove(v.p(sessRel+"/"+f)), syscall.EPERM)
	}
	testkit.WantErrno(t, "rename state", os.Rename(v.p(sessRel+"/state"), v.p(sessRel+"/state2")), syscall.EPERM)
	testkit.WantErrno(t, "rename session", os.Rename(v.p(sessRel), v.p(agentRel+"/session/s2")), syscall.EPERM)
	testkit.WantErrno(t, "rmdir session", syscall.Rmdir(v.p(sessRel)), syscall.ENOTEMPTY)
	testkit.WantErrno(t, "rmdir empty root/", syscall.Rmdir(v.p(agentRel+"/root")), syscall.EPERM)
	testkit.WantErrno(t, "truncate log", os.Truncate(v.p(sessRel+"/events.jsonl"), 0), syscall.EPERM)
}

func TestLogAppend(t *testing.T) {
	v := mountEnv(t)
	v.session()
	log := v.p(sessRel + "/messages.jsonl")
	_, err := os.OpenFile(log, os.O_WRONLY, 0)
	testkit.WantErrno(t, "open without O_APPEND", err, syscall.EPERM)

	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	testkit.Must(t, err)
	line1 := `{"role":"user","content":"hello"}` + "\n"
	_, err = f.WriteString(line1)
	testkit.Must(t, err)
	_, err = f.WriteString("not json\n")
	testkit.WantErrno(t, "append a bad line", err, syscall.EINVAL)
	// A line in three writes is committed when its newline arrives.
	for _, part := range []string{`{"role":"assistant",`, `"content":"hi"`, "}\n"} {
		_, err = f.WriteString(part)
		testkit.Must(t, err)
	}
	testkit.Must(t, f.Close())
	// Stored with the writer's uid (root's here).
	want := `{"role":"user","content":"hello","uid":0}` + "\n" + `{"role":"assistant","content":"hi","uid":0}` + "\n"
	if got := v.read(sessRel + "/messages.jsonl"); got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
	st, err := os.Stat(log)
	testkit.Must(t, err)
	if st.Size() != int64(len(want)) {
		t.Errorf("stat size %d, want %d", st.Size(), len(want))
	}
	if got := v.read(sessRel + "/latest.md"); got != "hi\n" {
		t.Errorf("latest.md = %q", got)
	}

	// A partial line at close: EINVAL, nothing appended, an error event.
	f, err = os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	testkit.Must(t, err)
	_, err = f.WriteString(`{"role":"user"`)
	testkit.Must(t, err)
	testkit.WantErrno(t, "close with a partial line", f.Close(), syscall.EINVAL)
	if got := v.read(sessRel + "/messages.jsonl"); got != want {
		t.Errorf("log after partial = %q", got)
	}
	v.eventually("EINVAL event after a discarded partial line", func() bool {
		return strings.Contains(v.read(sessRel+"/events.jsonl"), `"code":"EINVAL"`)
	})
}

// TestLogLiveRead: a reader holding the log open sees lines appended by
// another writer at once, and its stat size is exact.
func TestLogLiveRead(t *testing.T) {
	v := mountEnv(t)
	v.session()
	log := v.p(sessRel + "/events.jsonl")
	r, err := os.Open(log)
	testkit.Must(t, err)
	defer r.Close()
	buf := make([]byte, 4096)
	n0, _ := r.Read(buf)
	w, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	testkit.Must(t, err)
	line := `{"type":"note","n":1}` + "\n"
	_, err = w.WriteString(line)
	testkit.Must(t, err)
	w.Close()
	n, _ := r.Read(buf)
	if !strings.Contains(string(buf[:n]), `"n":1`) {
		t.Errorf("reader after append read %q (first read %d bytes)", buf[:n], n0)
	}
	st, _ := r.Stat()
	real, _ := os.Stat(v.store + "/" + sessRel + "/events.jsonl")
	if st.Size() != real.Size() {
		t.Errorf("fstat size %d, store %d", st.Size(), real.Size())
	}
}

func TestSingleValues(t *testing.T) {
	v := mountEnv(t)
	v.session()
	state := v.p(sessRel + "/state")
	testkit.Must(t, os.WriteFile(state, []byte("done\n"), 0))
	if got := v.read(sessRel + "/state"); got != "done\n" {
		t.Errorf("state = %q", got)
	}
	testkit.WantErrno(t, "write bad state", os.WriteFile(state, []byte("bogus\n"), 0), syscall.EINVAL)
	if got := v.read(sessRel + "/state"); got != "done\n" {
		t.Errorf("state after refusal = %q", got)
	}
	// Without a newline the value is judged at close.
	f, err := os.OpenFile(state, os.O_WRONLY, 0)
	testkit.Must(t, err)
	_, err = f.WriteString("cancelled")
	testkit.Must(t, err)
	testkit.Must(t, f.Close())
	if got := v.read(sessRel + "/state"); got != "cancelled\n" {
		t.Errorf("state = %q", got)
	}
	f, _ = os.OpenFile(state, os.O_WRONLY, 0)
	f.WriteString("nope")
	testkit.WantErrno(t, "close with a bad state", f.Close(), syscall.EINVAL)

	cwd := v.p(sessRel + "/cwd")
	testkit.Must(t, os.WriteFile(cwd, []byte("/workspace\n"), 0))
	if got := v.read(sessRel + "/cwd"); got != "/workspace\n" {
		t.Errorf("cwd = %q", got)
	}
	testkit.WantErrno(t, "relative cwd", os.WriteFile(cwd, []byte("rel/dir\n"), 0), syscall.EINVAL)
	testkit.WantErrno(t, "cwd with ..", os.WriteFile(cwd, []byte("/a/../b\n"), 0), syscall.EINVAL)

	meta := v.p(sessRel + "/meta.json")
	testkit.Must(t, os.WriteFile(meta, []byte(`{"client":"ctx","scope":"private","name":"x"}`), 0))
	if got := v.read(sessRel + "/meta.json"); !strings.Contains(got, `"name":"x"`) {
		t.Errorf("meta.json = %q", got)
	}
	testkit.WantErrno(t, "invalid meta.json", os.WriteFile(meta, []byte(`{"client":`), 0), syscall.EINVAL)
	testkit.WantErrno(t, "meta.json changes scope", os.WriteFile(meta, []byte(`{"client":"ctx","scope":"shared"}`), 0), syscall.EINVAL)

	_, err = os.OpenFile(v.p(sessRel+"/latest.md"), os.O_WRONLY, 0)
	testkit.WantErrno(t, "open latest.md for writing (root)", err, syscall.EPERM)
	_, err = os.OpenFile(v.p(sessRel+"/created_at"), os.O_WRONLY, 0)
	testkit.WantErrno(t, "open created_at for writing (root)", err, syscall.EPERM)
}

func TestIndexFiles(t *testing.T) {
	v := mountEnv(t)
	v.session()
	ix := agentRel + "/session/index/"
	testkit.Must(t, os.WriteFile(v.p(ix+"current"), []byte("s1\n"), 0o600))
	if got := v.read(ix + "current"); got != "s1\n" {
		t.Errorf("current = %q", got)
	}
	testkit.WantErrno(t, "current names a missing session", os.WriteFile(v.p(ix+"current"), []byte("nosuch\n"), 0o600), syscall.ENOENT)
	h := ix + "by-hash/abc123"
	testkit.Must(t, os.WriteFile(v.p(h), []byte("s1\n"), 0o600))
	if got := v.read(h); got != "s1\n" {
		t.Errorf("by-hash = %q", got)
	}
	testkit.Must(t, os.Remove(v.p(h)))
	_, err := os.Stat(v.p(h))
	testkit.WantErrno(t, "stat removed entry", err, syscall.ENOENT)
	testkit.WantErrno(t, "bad uuid", os.WriteFile(v.p(ix+"by-uuid/NOT-A-UUID"), []byte("s1\n"), 0o600), syscall.EINVAL)
	_, err = os.OpenFile(v.p(ix+"list"), os.O_WRONLY, 0)
	testkit.WantErrno(t, "open list for writing", err, syscall.EPERM)
}

func TestCtl(t *testing.T) {
	v := mountEnv(t)
	v.session()
	f, err := os.OpenFile(v.p(sessRel+"/ctl"), os.O_RDWR, 0)
	testkit.Must(t, err)
	defer f.Close()
	_, err = f.WriteString(`{"op":"ping"}` + "\n")
	testkit.Must(t, err)
	_, err = f.WriteString(`{"op":"ping"}` + "\n")
	testkit.WantErrno(t, "second request", err, syscall.EINVAL)
	got := readAll(t, f)
	if got != `{"type":"pong"}`+"\n" {
		t.Errorf("ping reply %q", got)
	}

	g, err := os.OpenFile(v.p(sessRel+"/ctl"), os.O_RDWR, 0)
	testkit.Must(t, err)
	defer g.Close()
	_, err = g.WriteString(`{"op":"nosuch"}` + "\n")
	testkit.WantErrno(t, "unknown op", err, syscall.EINVAL)
	if got := readAll(t, g); !strings.Contains(got, `"type":"error"`) || !strings.Contains(got, `"code":"EINVAL"`) || strings.Count(got, "\n") != 1 {
		t.Errorf("refusal frames %q", got)
	}
	// `echo … > ctl` truncates first: a no-op.
	testkit.Must(t, os.Truncate(v.p(sessRel+"/ctl"), 0))
}

// TestCtlSend runs a send through the control file (debug/echo agent).
func TestCtlSend(t *testing.T) {
	v := mountEnv(t)
	testkit.Must(t, os.MkdirAll(v.root+"/agent/coder.d", 0o755))
	testkit.Must(t, os.WriteFile(v.root+"/agent/coder.d/model", []byte("debug/echo\n"), 0o644))
	v.session()
	f, err := os.OpenFile(v.p(sessRel+"/ctl"), os.O_RDWR, 0)
	testkit.Must(t, err)
	defer f.Close()
	_, err = f.WriteString(`{"op":"send","id":"c1","input":"hello"}` + "\n")
	testkit.Must(t, err)
	got := readAll(t, f)
	ls := lines(got)
	if !strings.Contains(ls[0], `"type":"start"`) || !strings.Contains(ls[len(ls)-1], `"type":"done"`) {
		t.Errorf("send frames %q", got)
	}
	if !strings.Contains(v.read(sessRel+"/messages.jsonl"), `"hello"`) {
		t.Errorf("messages after send: %q", v.read(sessRel+"/messages.jsonl"))
	}
}

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, 100) // smaller than a frame: frames span reads
	for {
		n, err := f.Read(buf)
		out.Write(buf[:n])
		if n == 0 || err != nil {
			return out.String()
		}
	}
}

func TestFreeTree(t *testing.T) {
	v := mountEnv(t)
	v.session()
	for _, base := range []string{agentRel + "/root", sessRel + "/context"} {
		d := v.p(base)
		testkit.Must(t, os.MkdirAll(d+"/a/b", 0o755))
		testkit.Must(t, os.WriteFile(d+"/a/b/f.txt", []byte("x"), 0o644))
		testkit.Must(t, os.WriteFile(d+"/.bashrc", []byte("y"), 0o644))
		testkit.Must(t, os.Rename(d+"/a/b/f.txt", d+"/a/g.txt"))
		if b, err := os.ReadFile(d + "/a/g.txt"); err != nil || string(b) != "x" {
			t.Errorf("%s: read back %q %v", base, b, err)
		}
		testkit.WantErrno(t, "rmdir non-empty", syscall.Rmdir(d+"/a"), syscall.ENOTEMPTY)
		testkit.Must(t, os.RemoveAll(d+"/a"))
		testkit.Must(t, os.Symlink("/etc/passwd", d+"/link"))
	}
	if _, err := os.Stat(v.store + "/" + agentRel + "/root/.bashrc"); err != nil {
		t.Errorf("root/ is not the store's tree: %v", err)
	}
}

func TestPrivacy(t *testing.T) {
	v := mountEnv(t)
	v.session()
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
		return cmd.CombinedOutput()
	}
	if out, err := run("/bin/cat", v.p(sessRel+"/state")); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("uid 1001 read uid 0's state: %v %s", err, out)
	}
	if out, err := run("/bin/ls", v.p("home/0")); err == nil {
		t.Errorf("uid 1001 listed home/0: %s", out)
	}
	if out, err := run("/bin/ls", "-ld", v.p("home/1001")); err != nil {
		t.Errorf("uid 1001's own home: %v %s", err, out)
	} else if !strings.Contains(string(out), "drwx------") {
		t.Errorf("uid 1001's home: %s", out)
	}
	if out, err := run("/bin/sh", "-c", "echo x > "+v.p("home/1001/notes")); err == nil {
		t.Errorf("uid 1001 created home/1001/notes: %s", out)
	}
	st, err := os.Stat(v.p("home/1001"))
	testkit.Must(t, err)
	if st.Sys().(*syscall.Stat_t).Uid != 1001 {
		t.Errorf("home/1001 owner %d", st.Sys().(*syscall.Stat_t).Uid)
	}
	_, err = os.Stat(v.p("home/4242"))
	testkit.WantErrno(t, "another uid's missing home", err, syscall.ENOENT)
}

// TestReadOnlyForOwner: an owner writing a read-only file gets the
// kernel's EACCES (honest 0400 mode); a log needs O_APPEND.
func TestReadOnlyForOwner(t *testing.T) {
	v := mountEnv(t)
	as1001 := func(script string) ([]byte, error) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
		return cmd.CombinedOutput()
	}
	home := v.p("home/1001")
	if out, err := as1001("ls " + home + " && mkdir " + home + "/agent"); err != nil {
		// ENGINE: see env.agent.
		t.Errorf("uid 1001 mkdir agent/: %v %s", err, out)
		os.MkdirAll(v.store+"/home/1001/agent", 0o700)
		os.Chown(v.store+"/home/1001/agent", 1001, 1001)
	}
	s := home + "/agent/coder/session/s1"
	if out, err := as1001("mkdir " + home + "/agent/coder && mkdir " + s); err != nil {
		t.Fatalf("uid 1001 mkdir session: %v %s", err, out)
	}
	out, err := as1001("echo x >> " + s + "/latest.md")
	if err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("owner appended to latest.md: %v %s", err, out)
	}
	out, err = as1001("echo '{}' > " + s + "/events.jsonl")
	if err == nil || !strings.Contains(string(out), "not permitted") {
		t.Errorf("owner wrote a log without O_APPEND: %v %s", err, out)
	}
	if out, err := as1001("echo '{\"a\":1}' >> " + s + "/events.jsonl && echo active > " + s + "/state && cat " + s + "/state"); err != nil || string(out) != "active\n" {
		t.Errorf("owner shell writes: %v %q", err, out)
	}
	if out, err := as1001("ls -l " + s + "/ctl " + s + "/latest.md"); err != nil || !strings.Contains(string(out), "-rw------- 1 1001 1001 0") || !strings.Contains(string(out), "-r-------- 1 1001") {
		t.Errorf("modes: %v %s", err, out)
	}
}

// TestShellForms drives the files the way SPEC shows them from a shell.
func TestShellForms(t *testing.T) {
	v := mountEnv(t)
	v.session()
	s := v.p(sessRel)
	sh := func(script string) string {
		out, err := exec.Command("/bin/bash", "-c", script).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v %s", script, err, out)
		}
		return string(out)
	}
	if got := sh(`exec 3<>` + s + `/ctl; printf '%s\n' '{"op":"ping"}' >&3; cat <&3`); got != `{"type":"pong"}`+"\n" {
		t.Errorf("ctl from bash: %q", got)
	}
	sh(`printf '{"a":1' >> ` + s + `/events.jsonl`) // exits 0: shells ignore close errors
	// RELEASE comes after close returns: wait for the record.
	v.eventually("discarded partial line recorded", func() bool {
		return strings.Contains(v.read(sessRel+"/events.jsonl"), `"code":"EINVAL"`)
	})

	tail := exec.Command("tail", "-n0", "-f", s+"/messages.jsonl")
	out, _ := tail.StdoutPipe()
	testkit.Must(t, tail.Start())
	defer tail.Process.Kill()
	time.Sleep(300 * time.Millisecond)
	sh(`echo '{"role":"user","content":"live"}' >> ` + s + `/messages.jsonl`)
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		n, _ := out.Read(b)
		got <- string(b[:n])
	}()
	select {
	case line := <-got:
		if !strings.Contains(line, "live") {
			t.Errorf("tail -f saw %q", line)
		}
	case <-time.After(3 * time.Second):
		t.Errorf("tail -f saw nothing within 3 s")
	}
}

// TestSharedSpace: root makes a space and gives it to a group; members
// work there, others get EACCES from the kernel.
func TestSharedSpace(t *testing.T) {
	v := mountEnv(t)
	space := v.p("shared/team")
	testkit.Must(t, os.Mkdir(space, 0o770))
	testkit.Must(t, os.Chown(space, 0, 1001))
	testkit.Must(t, os.Chmod(space, 0o2770))
	st, err := os.Stat(space)
	testkit.Must(t, err)
	if st.Sys().(*syscall.Stat_t).Gid != 1001 || st.Mode().Perm() != 0o770 {
		t.Errorf("space gid %d mode %v", st.Sys().(*syscall.Stat_t).Gid, st.Mode())
	}
	as := func(uid uint32, script string) ([]byte, error) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: 2000, Groups: []uint32{1001}}}
		if uid == 1002 {
			cmd.SysProcAttr.Credential.Groups = nil
		}
		return cmd.CombinedOutput()
	}
	s := space + "/agent/coder/session/s1"
	if out, err := as(1003, "mkdir "+space+"/agent"); err != nil {
		// ENGINE: see env.agent.
		t.Errorf("member mkdir shared/team/agent: %v %s", err, out)
		os.Mkdir(v.store+"/shared/team/agent", 0o2770)
		os.Chown(v.store+"/shared/team/agent", 0, 1001)
		os.Chmod(v.store+"/shared/team/agent", 0o2770)
	}
	if out, err := as(1003, "mkdir "+space+"/agent/coder && mkdir "+s+" && cat "+s+"/state"); err != nil || string(out) != "idle\n" {
		t.Errorf("member makes a shared session: %v %s", err, out)
	}
	if out, err := as(1002, "ls "+space); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("non-member listed the space: %v %s", err, out)
	}
	testkit.WantErrno(t, "mkdir bad space name", os.Mkdir(v.p("shared/bad name"), 0o770), syscall.EINVAL)
	testkit.WantErrno(t, "shared/team/history", os.Mkdir(space+"/history", 0o770), syscall.EPERM)
}

// No ioctl reaches the store through a free tree: the server would make it
// as root, with root's privileges (FS_IOC_SETFLAGS setting the immutable
// flag needs CAP_LINUX_IMMUTABLE, which users lack). It is refused
// (ENOTTY), and the store's file keeps its flags.
func TestFreeTreeRefusesIoctl(t *testing.T) {
	v := mountEnv(t)
	v.session()
	f := v.p(agentRel + "/root/immutable")
	inStore := v.store + "/" + agentRel + "/root/immutable"
	testkit.Must(t, os.WriteFile(f, []byte("x"), 0o644))
	t.Cleanup(func() { exec.Command("chattr", "-i", inStore).Run() }) // should the test fail
	py := `
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x10))  # FS_IOC_SETFLAGS, FS_IMMUTABLE_FL
    print("set")
except OSError as e:
    print(e.strerror)
`
	out, err := exec.Command("/usr/bin/python3", "-c", py, f).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "Inappropriate ioctl for device" {
		t.Fatalf("FS_IOC_SETFLAGS through the mount: %v %q, want ENOTTY", err, out)
	}
	if out, err := exec.Command("lsattr", inStore).CombinedOutput(); err != nil || strings.Contains(strings.Fields(string(out))[0], "i") {
		t.Fatalf("the store's file: %v %s", err, out)
	}
	testkit.Must(t, os.Remove(f))
}
