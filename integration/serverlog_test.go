package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// The server says what it does (--log-file, --log-level debug): its
// start, mounts, sockets, readiness, each run's start and end with its run
// id, refusals at debug level, its stop; never an input nor an output. The
// lines go to the file, not to stderr.
func TestServerLogText(t *testing.T) {
	requireFUSE(t)
	var logPath string
	s := newServerWith(t, func(s *server) {
		logPath = filepath.Join(filepath.Dir(s.root), "server.log")
		s.args = []string{"--log-file", logPath, "--log-level", "debug"}
		s.define("broken", map[string]string{"abi": "text", "program": "#!/bin/sh\necho broken-output\nexit 3\n"})
	})
	waitLogged(t, logPath, " msg=ready ") // the sockets answer before: the order below is the log's
	runOK := runID(t, s.send("logged", "c1", "input-that-must-not-be-logged"))
	runBad := runID(t, s.mustRequest("broken", `{"op":"send","id":"c2","session":"b","input":"more-private-input"}`))
	if code := errorCode(s.mustRequest("coder", `{"op":"send","id":"c3","session":"../x","input":"x"}`)); code != "EINVAL" {
		t.Fatalf("a bad session name: %q, want EINVAL", code)
	}
	pid := s.cmd.Process.Pid
	s.kill(s.cmd, syscall.SIGTERM)
	log := fileBytes(t, logPath)

	q := regexp.QuoteMeta
	want := []string{ // in this order
		`level=INFO msg=starting version="ctxfs [^"]+" root=` + q(s.root) + ` store=` + q(s.store) + fmt.Sprintf(` pid=%d uid=0`, pid),
		`level=INFO msg="store opened" store=` + q(s.store),
		`level=INFO msg=mounted dir=` + q(s.root) + `/home device=\d+:\d+`,
		`level=INFO msg=mounted dir=` + q(s.root) + `/shared device=\d+:\d+`,
		`level=INFO msg=listening socket=` + q(s.root) + `/agent/coder.sock agent=coder`,
		`level=INFO msg=ready root=` + q(s.root) + ` systemd=false`,
		`level=INFO msg="run start" run=` + runOK + ` agent=coder session=logged scope=private home=home/0 uid=0`,
		`level=INFO msg="run done" run=` + runOK + ` agent=coder session=logged scope=private home=home/0 uid=0 took=\S+ status=ok`,
		`level=INFO msg="run start" run=` + runBad + ` agent=broken session=b scope=private home=home/0 uid=0`,
		`level=WARN msg="run error" run=` + runBad + ` agent=broken session=b scope=private home=home/0 uid=0 took=\S+ status=error error=EIO`,
		`level=DEBUG msg=refused errno=EINVAL op="" agent=coder uid=0 pid=\d+ reason="EINVAL: invalid session name \\"../x\\""`,
		`level=INFO msg=stopping signal=terminated`,
		`level=INFO msg=unmounted root=` + q(s.root),
		`level=INFO msg=stopped root=` + q(s.root),
	}
	wantLinesInOrder(t, log, want)
	for _, secret := range []string{"input-that-must-not-be-logged", "more-private-input", "broken-output"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q:\n%s", secret, log)
		}
	}
	if strings.Contains(s.logText(), "msg=") {
		t.Errorf("log lines on stderr although --log-file was given:\n%s", s.logText())
	}
}

// A request refused through a session's ctl file is logged at debug
// level as a socket's is: errno, op, agent, uid, pid and the reason cut
// to 200 bytes; never the request's input. A second request on one open
// file is logged too.
func TestServerLogCtlRefusal(t *testing.T) {
	var logPath string
	s := newFuseServerWith(t, func(s *server) {
		logPath = filepath.Join(filepath.Dir(s.root), "server.log")
		s.args = []string{"--log-file", logPath, "--log-level", "debug"}
	})
	s.send("c", "c0", "hi")
	ctl := s.mnt(sessRel("c")) + "/ctl"
	for _, session := range []string{strings.Repeat("n", 300), "other"} {
		f, err := os.OpenFile(ctl, os.O_RDWR, 0)
		testkit.Must(t, err)
		_, err = f.WriteString(`{"op":"send","id":"x1","session":"` + session + `","input":"ctl-input-that-must-not-be-logged"}` + "\n")
		testkit.WantErrno(t, "a request naming session "+session, err, syscall.EINVAL)
		f.Close()
	}
	f, err := os.OpenFile(ctl, os.O_RDWR, 0)
	testkit.Must(t, err)
	_, err = f.WriteString(`{"op":"ping"}` + "\n")
	testkit.Must(t, err)
	_, err = f.WriteString(`{"op":"send","id":"x2","input":"second-input-that-must-not-be-logged"}` + "\n")
	testkit.WantErrno(t, "a second request", err, syscall.EINVAL)
	f.Close()
	s.kill(s.cmd, syscall.SIGTERM)
	log := fileBytes(t, logPath)

	wantLinesInOrder(t, log, []string{
		`level=DEBUG msg=refused errno=EINVAL op="" agent=coder uid=0 pid=\d+ reason="EINVAL: invalid session name \\"n+…"$`,
		`level=DEBUG msg=refused errno=EINVAL op=send agent=coder uid=0 pid=\d+ reason="ctl: EINVAL: request names session \\"other\\", this is \\"c\\""$`,
		`level=DEBUG msg=refused errno=EINVAL op="" agent=coder uid=0 pid=\d+ reason="ctl: EINVAL: one request per open file"$`,
	})
	m := regexp.MustCompile(`msg=refused .* reason=("EINVAL: invalid session name .*")`).FindStringSubmatch(log)
	if m == nil {
		t.Fatal("no refusal of the long session name")
	}
	if why, err := strconv.Unquote(m[1]); err != nil || len(why) > 200+len("…") {
		t.Errorf("the reason %s (%v): over 200 bytes", m[1], err)
	}
	for _, secret := range []string{"input-that-must-not-be-logged", `"op":`} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds %q:\n%s", secret, log)
		}
	}
}

// A watchdog that dies under a running server is logged at error level
// with its pid, not printed on the server's stderr.
func TestServerLogWatchdogGone(t *testing.T) {
	var logPath string
	s := newFuseServerWith(t, func(s *server) {
		logPath = filepath.Join(filepath.Dir(s.root), "server.log")
		s.args = []string{"--log-file", logPath}
	})
	wd := watchdogOf(s.cmd.Process.Pid)
	if wd == 0 {
		t.Fatal("no watchdog")
	}
	testkit.Must(t, syscall.Kill(wd, syscall.SIGKILL))
	waitLogged(t, logPath, fmt.Sprintf(`level=ERROR msg="watchdog gone; a kill -9 of this server may now leave callers hanging" pid=%d err="signal: killed"`, wd))
	if strings.Contains(s.logText(), "watchdog") {
		t.Errorf("the server's stderr speaks of the watchdog although --log-file was given:\n%s", s.logText())
	}
}

// unstartedServer is a root with the agent coder (debug/echo) and a
// store, in a fresh directory, for tests that start the server their own
// way (in the background, through mount(8)): whatever they start is
// stopped and unmounted at the end.
func unstartedServer(t *testing.T) *server {
	t.Helper()
	base := t.TempDir()
	s := &server{t: t, root: filepath.Join(base, "ctx"), store: filepath.Join(base, "store")}
	s.define("coder", map[string]string{"model": "debug/echo"})
	umountLeftovers(t, s.root)
	t.Cleanup(func() { exec.Command(ctxfsBin, "umount", "--root", s.root).Run() })
	return s
}

// waitLogged waits until the log at path holds text.
func waitLogged(t *testing.T, path, text string) {
	t.Helper()
	eventually(t, 10*time.Second, path+" holds "+text, func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), text)
	})
}

// runID is the run of a send's frames (its start frame's).
func runID(t *testing.T, frames []frame) string {
	t.Helper()
	for _, f := range frames {
		if f["type"] == "start" {
			if id, _ := f["run"].(string); strings.HasPrefix(id, "ctx-") {
				return id
			}
		}
	}
	t.Fatalf("no start frame with a run id: %v", frames)
	return ""
}

// wantLinesInOrder fails unless each pattern matches a whole line of log,
// each after the line the one before matched.
func wantLinesInOrder(t *testing.T, log string, patterns []string) {
	t.Helper()
	lines := strings.Split(log, "\n")
	at := 0
	for _, p := range patterns {
		re := regexp.MustCompile(`^time=\S+ ` + p)
		found := false
		for ; at < len(lines) && !found; at++ {
			found = re.MatchString(lines[at])
		}
		if !found {
			t.Fatalf("no line matching %q (in this order) in the log:\n%s", p, log)
		}
	}
}

// In json format every line is one JSON object; a run's lines carry its
// id; at the default level (info) no refusal is logged.
func TestServerLogJSON(t *testing.T) {
	requireFUSE(t)
	var logPath string
	s := newServerWith(t, func(s *server) {
		logPath = filepath.Join(filepath.Dir(s.root), "server.json")
		s.args = []string{"--log-file=" + logPath, "--log-format=json"}
	})
	waitLogged(t, logPath, `"msg":"ready"`)
	run := runID(t, s.send("j", "c1", "hello"))
	s.mustRequest("coder", `{"op":"bogus"}`)
	s.kill(s.cmd, syscall.SIGTERM)
	var msgs []string
	for _, l := range strings.Split(strings.TrimSuffix(fileBytes(t, logPath), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		if m["level"] == "DEBUG" {
			t.Errorf("a debug line at the default level: %q", l)
		}
		if m["run"] == run {
			msgs = append(msgs, fmt.Sprint(m["msg"]))
			if m["agent"] != "coder" || m["session"] != "j" || m["scope"] != "private" || m["uid"] != float64(0) {
				t.Errorf("run line without its agent, session, scope or uid: %q", l)
			}
		}
	}
	if strings.Join(msgs, ",") != "run start,run done" {
		t.Fatalf("lines of run %s: %v, want run start, run done", run, msgs)
	}
}

// A background server logs where its output has always gone,
// STORE/ctxfs.log, and a run's lines are there.
func TestServerLogBackgroundDefault(t *testing.T) {
	requireFUSE(t)
	s := unstartedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, ctxfsBin, "mount", "--root", s.root, "--store", s.store).CombinedOutput()
	if err != nil {
		t.Fatalf("ctxfs mount: %v\n%s", err, out)
	}
	logPath := filepath.Join(s.store, "ctxfs.log")
	if !strings.Contains(string(out), "log "+logPath+")") {
		t.Errorf("mount does not name its log: %q", out)
	}
	run := runID(t, s.send("bg", "c1", "hello"))
	if out, err := exec.CommandContext(ctx, ctxfsBin, "umount", "--root", s.root).CombinedOutput(); err != nil {
		t.Fatalf("ctxfs umount: %v\n%s", err, out)
	}
	wantLinesInOrder(t, fileBytes(t, logPath), []string{
		`level=INFO msg=ready `,
		`level=INFO msg="run start" run=` + run + ` agent=coder session=bg `,
		`level=INFO msg="run done" run=` + run + ` `,
		`level=INFO msg=stopped `,
	})
	if st, err := os.Stat(logPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the log file: %v, %v; want mode 0600", st, err)
	}
}

// A run a killed server left active is closed by the next one at its
// start, and logged so: a run error with EINTR, between starting and
// store opened.
func TestServerLogInterruptedRun(t *testing.T) {
	requireFUSE(t)
	var logPath string
	s := newServerWith(t, func(s *server) {
		logPath = filepath.Join(filepath.Dir(s.root), "server.log")
		s.args = []string{"--log-file", logPath}
		s.define("slow", map[string]string{"abi": "text", "program": "#!/bin/sh\nexec sleep 10\n"})
	})
	waitLogged(t, logPath, " msg=ready ")
	go s.request("slow", `{"op":"send","id":"c1","session":"cut","input":"x"}`) // ends with the server
	waitLogged(t, logPath, ` msg="run start" `)
	m := regexp.MustCompile(`msg="run start" run=(ctx-[0-9a-f]{32}) agent=slow`).FindStringSubmatch(fileBytes(t, logPath))
	if m == nil {
		t.Fatalf("no run start of slow in the log:\n%s", fileBytes(t, logPath))
	}
	s.kill(s.cmd, syscall.SIGKILL)
	s.start()
	waitLogged(t, logPath, ` msg="store opened" `) // written behind (logx.Queue), maybe after the sockets answer
	wantLinesInOrder(t, fileBytes(t, logPath), []string{
		`level=INFO msg="run start" run=` + m[1] + ` agent=slow session=cut `,
		`level=INFO msg=starting `,
		`level=WARN msg="run error" run=` + m[1] + ` agent=slow session=cut scope=private home=home/0 status=error error=EINTR interrupted=true`,
		`level=INFO msg="store opened" `,
	})
}

// A --log-file that is a symbolic link (planted where other users can
// write) is refused before anything is made or mounted, in the foreground
// and in the background, and its target is never written.
func TestLogFileSymlinkRefused(t *testing.T) {
	requireFUSE(t)
	s := unstartedServer(t)
	base := filepath.Dir(s.root)
	target, link := filepath.Join(base, "target"), filepath.Join(base, "ctxfs.log")
	testkit.Must(t, os.WriteFile(target, nil, 0o600))
	testkit.Must(t, os.Symlink(target, link))
	for _, mode := range [][]string{{"--foreground"}, nil} {
		out, code := ctxfsCmd(t, append([]string{"mount", "--root", s.root, "--store", s.store, "--log-file", link}, mode...)...)
		if want := "ctxfs: log file " + link + ": a symbolic link; name the file itself\n"; code != 1 || out != want {
			t.Errorf("mount %v: exit %d, %q; want 1, %q", mode, code, out, want)
		}
		if _, err := os.Stat(s.store); !os.IsNotExist(err) || mountsAt(s.mnt("home")) != 0 {
			t.Fatalf("mount %v: the store was made (%v) or mounted", mode, err)
		}
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Errorf("the link's target was written: %q", b)
	}
}
