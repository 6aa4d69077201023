package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// TestRealTools drives a session of the real server with the tools people
// use on it: cat, head, less, grep, jq, wc, shell redirections, mv, rm,
// truncate and python3.
func TestRealTools(t *testing.T) {
	s := newFuseServer(t)
	s.send("tools", "c1", "hello world")
	s.send("tools", "c2", "second message")
	dir := s.mnt(sessRel("tools"))
	store := s.sessionDir(0, "coder", "tools")
	msgs := fileBytes(t, filepath.Join(store, "messages.jsonl"))
	log := dir + "/messages.jsonl"

	if got := bash(t, "cat "+log); got != msgs {
		t.Errorf("cat = %q, store holds %q", got, msgs)
	}
	if got := bash(t, "head -n 1 "+log); got != strings.SplitAfter(msgs, "\n")[0] {
		t.Errorf("head -n 1 = %q", got)
	}
	if got := bash(t, "less -F -X "+log+" < /dev/null"); got != msgs {
		t.Errorf("less -F -X = %q", got)
	}
	if got := bash(t, "grep -c '\"role\":\"user\"' "+log); got != "2\n" {
		t.Errorf("grep -c user lines = %q", got)
	}
	if got := bash(t, "jq -r 'select(.role==\"assistant\") | .content' "+log); !strings.Contains(got, "second message") {
		t.Errorf("jq assistant contents = %q", got)
	}
	if got := bash(t, "jq -r .type "+dir+"/events.jsonl | sort -u | tr '\\n' ' '"); !strings.Contains(got, "start") || !strings.Contains(got, "done") {
		t.Errorf("jq event types = %q", got)
	}
	wc := strings.Fields(bash(t, "wc -l -c < "+log))
	if wc[0] != strconv.Itoa(strings.Count(msgs, "\n")) || wc[1] != strconv.Itoa(len(msgs)) {
		t.Errorf("wc -l -c = %v, want %d %d", wc, strings.Count(msgs, "\n"), len(msgs))
	}
	for _, f := range []string{"state", "latest.md", "cwd", "created_at", "updated_at", "meta.json", "index"} {
		p := dir + "/" + f
		if f == "index" {
			p = s.mnt(coderRel + "/session/index/current")
		}
		want := fileBytes(t, p)
		for _, tool := range []string{"cat", "head -c 100000", "less -F -X", "tail -n 5"} {
			if got := bash(t, tool+" "+p+" < /dev/null"); got != want {
				t.Errorf("%s %s = %q, want %q", tool, f, got, want)
			}
		}
	}
	if got := bash(t, "cat "+s.mnt(coderRel+"/session/index/list")); got != "tools\n" {
		t.Errorf("index/list = %q", got)
	}

	// Shell redirections.
	bash(t, `echo '{"role":"user","content":"from the shell"}' >> `+log)
	if got := bash(t, "tail -n 1 "+log); got != withUid(`{"role":"user","content":"from the shell"}`, 0)+"\n" {
		t.Errorf("after >>: last line %q", got)
	}
	bash(t, "echo done > "+dir+"/state")
	if got := bash(t, "cat "+dir+"/state"); got != "done\n" {
		t.Errorf("state after > = %q", got)
	}
	bash(t, "printf /srv > "+dir+"/cwd") // the missing newline is added
	if got := s.readMnt(sessRel("tools") + "/cwd"); got != "/srv\n" {
		t.Errorf("cwd after printf > = %q", got)
	}
	if out, err := bashAs(t, nil, "echo '{}' > "+log); err == nil || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("> on a log: %v %q", err, out)
	}
	if got := bash(t, `exec 3<>`+dir+`/ctl; printf '%s\n' '{"op":"status"}' >&3; cat <&3`); !strings.Contains(got, `"type":"status"`) || !strings.Contains(got, `"session":"tools"`) {
		t.Errorf("status through ctl from bash: %q", got)
	}

	// mv, rm, truncate: refused on ABI entries, ordinary in free trees.
	for _, c := range []string{"mv " + dir + "/state " + dir + "/state2", "mv " + log + " " + dir + "/context/m", "rm -f " + log, "rm -f " + dir + "/latest.md", "truncate -s 0 " + log, "truncate -s 10 " + dir + "/events.jsonl", "rm -rf " + dir} {
		if out, err := bashAs(t, nil, c); err == nil || !strings.Contains(out, "not permitted") && !strings.Contains(out, "not empty") {
			t.Errorf("%s: %v %q", c, err, out)
		}
	}
	if got := fileBytes(t, filepath.Join(store, "messages.jsonl")); !strings.HasPrefix(got, msgs) {
		t.Errorf("the refusals changed the log: %q", got)
	}
	free := s.mnt(coderRel + "/root")
	bash(t, "cd "+free+" && echo abc > a && mv a b && truncate -s 2 b && cat b > c && rm b && mkdir -p d/e && mv c d/e/ && ls -R > /dev/null")
	if got := bash(t, "cat "+free+"/d/e/c"); got != "ab" {
		t.Errorf("free tree: %q", got)
	}
	bash(t, "cd "+dir+"/context && echo x > f && mv f g && truncate -s 0 g && rm g")
	// A free tree's root has one inode number, listed or looked up.
	for _, tree := range []string{coderRel + "/root", sessRel("tools") + "/context"} {
		p := s.mnt(tree)
		listed := bash(t, "ls -i "+filepath.Dir(p)+" | awk '$2 == \""+filepath.Base(p)+"\" {print $1}'")
		if stat := bash(t, "stat -c %i "+p); listed != stat {
			t.Errorf("%s: inode %q listed, %q by stat", tree, listed, stat)
		}
	}

	// python3: append, read back, stat size, ctl on one descriptor.
	py := `
import os, sys, json
d = sys.argv[1]
log = os.path.join(d, "messages.jsonl")
with open(log, "a") as f:
    f.write(json.dumps({"role": "user", "content": "from python"}) + "\n")
data = open(log).read()
assert data.endswith('"from python","uid":0}\n'), data[-80:]
assert os.stat(log).st_size == len(data.encode()), (os.stat(log).st_size, len(data))
fd = os.open(os.path.join(d, "ctl"), os.O_RDWR)
os.write(fd, b'{"op":"ping"}\n')
out = b""
while True:
    b = os.read(fd, 7)
    if not b:
        break
    out += b
os.close(fd)
print(out.decode(), end="")
try:
    os.open(log, os.O_WRONLY)
    print("opened a log without O_APPEND")
except PermissionError as e:
    print("EPERM" if e.errno == 1 else e)
`
	out, err := runCmd(t, nil, nil, "/usr/bin/python3", "-c", py, dir)
	if err != nil || out != `{"type":"pong"}`+"\nEPERM\n" {
		t.Errorf("python3: %v %q", err, out)
	}
}

// TestTailFollows: `tail -f` on a log shows a line within a second of it
// being recorded, whether the server or another writer appended it.
func TestTailFollows(t *testing.T) {
	s := newFuseServer(t)
	s.send("live", "c1", "first")
	log := s.mnt(sessRel("live") + "/messages.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// tail polls FUSE files (no inotify); -s 0.2 keeps its own polling
	// interval out of the measure.
	tail := exec.CommandContext(ctx, "tail", "-s", "0.2", "-n", "+1", "-f", log)
	out, err := tail.StdoutPipe()
	testkit.Must(t, err)
	testkit.Must(t, tail.Start())
	t.Cleanup(func() { tail.Process.Kill(); tail.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine := func(what, want string) {
		t.Helper()
		deadline := time.After(time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("tail ended before %s", what)
				}
				if strings.Contains(l, want) {
					return
				}
			case <-deadline:
				t.Fatalf("tail -f did not show %s within a second", what)
			}
		}
	}
	waitLine("the existing log", `"first"`)
	s.send("live", "c2", "over the socket")
	waitLine("a line sent over the socket", `"over the socket"`)
	bash(t, `echo '{"role":"user","content":"by another writer"}' >> `+log)
	waitLine("a line appended by another writer", `"by another writer"`)
	bash(t, `exec 3<>`+s.mnt(sessRel("live"))+`/ctl; printf '%s\n' '{"op":"send","id":"c3","input":"through ctl"}' >&3; cat <&3 > /dev/null`)
	waitLine("a line sent through ctl", `"through ctl"`)
}

// TestCtlForms: the control file from bash, python3 and Go; refusals,
// a second request, and session/scope that do not match the directory.
func TestCtlForms(t *testing.T) {
	s := newFuseServer(t)
	s.send("c", "c0", "hi")
	s.send("other", "o0", "hi")
	dir := s.mnt(sessRel("c"))
	ctl := dir + "/ctl"

	got := bash(t, `exec 3<>`+ctl+`; printf '%s\n' '{"op":"send","id":"b1","input":"from bash"}' >&3; cat <&3`)
	checkSendFrames(t, "bash", got)

	py := `
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.write(fd, b'{"op":"send","id":"p1","input":"from python"}\n')
while True:
    b = os.read(fd, 4096)
    if not b:
        break
    sys.stdout.write(b.decode())
`
	out, err := runCmd(t, nil, nil, "/usr/bin/python3", "-c", py, ctl)
	if err != nil {
		t.Fatalf("python3 ctl: %v %s", err, out)
	}
	checkSendFrames(t, "python3", out)

	f, err := os.OpenFile(ctl, os.O_RDWR, 0)
	testkit.Must(t, err)
	_, err = f.WriteString(`{"op":"send","id":"g1","session":"c","scope":"private","input":"from go"}` + "\n")
	testkit.Must(t, err)
	_, err = f.WriteString(`{"op":"ping"}` + "\n")
	testkit.WantErrno(t, "a second request on the same open file", err, syscall.EINVAL)
	b := readFrames(t, f)
	f.Close()
	checkSendFrames(t, "go", b)
	if m := s.readMnt(sessRel("c") + "/messages.jsonl"); !strings.Contains(m, "from bash") || !strings.Contains(m, "from python") || !strings.Contains(m, "from go") {
		t.Errorf("messages after three ctl sends: %q", m)
	}

	time.Sleep(1200 * time.Millisecond) // the index snapshot settles
	before := storeSnapshot(t, s)
	for _, req := range []string{
		`{"op":"send","id":"x1","session":"other","input":"wrong session"}`,
		`{"op":"send","id":"x2","scope":"shared","space":"team","input":"wrong scope"}`,
		`{"op":"send","id":"x3","scope":"temp","input":"wrong scope"}`,
		`{"op":"nosuch"}`,
		`{"op":"send","id":"c0","input":"payload reuse"}`,
		`not json`,
	} {
		f, err := os.OpenFile(ctl, os.O_RDWR, 0)
		testkit.Must(t, err)
		_, err = f.WriteString(req + "\n")
		testkit.WantErrno(t, req, err, syscall.EINVAL)
		got := readFrames(t, f)
		f.Close()
		var fr frame
		if strings.Count(got, "\n") != 1 || json.Unmarshal([]byte(got), &fr) != nil || fr["type"] != "error" || fr["code"] != "EINVAL" {
			t.Errorf("%s: frames after the refusal %q, want one EINVAL error frame and EOF", req, got)
		}
	}
	// The same refusals from bash: the write fails, one frame, EOF.
	out, err = bashAs(t, nil, `exec 3<>`+ctl+`; printf '%s\n' '{"op":"send","id":"x9","session":"other","input":"x"}' >&3; echo "write=$?"; cat <&3`)
	if err != nil || !strings.Contains(out, "Invalid argument") || !strings.Contains(out, "write=1") || !strings.Contains(out, `"code":"EINVAL"`) {
		t.Errorf("refusal from bash: %v %q", err, out)
	}
	testkit.Same(t, "refused ctl requests", before, storeSnapshot(t, s))
}

func readFrames(t *testing.T, f *os.File) string {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		var sb strings.Builder
		buf := make([]byte, 1000)
		for {
			n, err := f.Read(buf)
			sb.Write(buf[:n])
			if n == 0 || err != nil {
				done <- sb.String()
				return
			}
		}
	}()
	select {
	case s := <-done:
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("ctl reply did not end")
		return ""
	}
}

func checkSendFrames(t *testing.T, who, got string) {
	t.Helper()
	ls := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	var first, last frame
	if json.Unmarshal([]byte(ls[0]), &first) != nil || json.Unmarshal([]byte(ls[len(ls)-1]), &last) != nil ||
		first["type"] != "start" || last["type"] != "done" || last["status"] != "ok" {
		t.Errorf("send through ctl from %s: frames %q", who, got)
	}
}

// TestStatExact: stat sizes match the bytes a reader gets, right after
// every kind of append.
func TestStatExact(t *testing.T) {
	s := newFuseServer(t)
	s.send("st", "c0", "hi")
	dir := s.mnt(sessRel("st"))
	check := func(what string) {
		t.Helper()
		for _, f := range []string{"messages.jsonl", "events.jsonl", "latest.md", "state", "updated_at"} {
			st, err := os.Stat(dir + "/" + f)
			testkit.Must(t, err)
			b, err := os.ReadFile(dir + "/" + f)
			testkit.Must(t, err)
			if st.Size() != int64(len(b)) {
				t.Errorf("after %s: stat %s = %d, read %d bytes", what, f, st.Size(), len(b))
			}
		}
	}
	check("a send")
	// Keep a reader open across appends: its fstat must follow too.
	r, err := os.Open(dir + "/messages.jsonl")
	testkit.Must(t, err)
	defer r.Close()
	for i := 0; i < 20; i++ {
		if i%2 == 0 {
			s.send("st", fmt.Sprintf("c%d", i+1), "x"+strings.Repeat("x", i*100)) // an empty input is refused
		} else {
			testkit.Must(t, appendMnt(dir+"/messages.jsonl", fmt.Sprintf(`{"role":"assistant","content":"a%d"}`+"\n", i)))
		}
		check(fmt.Sprintf("append %d", i))
		st, _ := r.Stat()
		real, _ := os.Stat(filepath.Join(s.sessionDir(0, "coder", "st"), "messages.jsonl"))
		if st.Size() != real.Size() {
			t.Errorf("append %d: fstat of an open reader %d, store %d", i, st.Size(), real.Size())
		}
	}
}
