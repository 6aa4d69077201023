package agent

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// sessionCall makes one call through ts and decodes its result.
func sessionCall(t *testing.T, ts *toolSession, ctx context.Context, name, args string) (map[string]any, bool) {
	t.Helper()
	content, isError := ts.exec(ctx, ToolCall{ID: "call_s", Name: name, Arguments: args}, func(FileBefore) error { return nil })
	var out map[string]any
	if err := json.Unmarshal([]byte(content), &out); err != nil {
		t.Fatalf("%s %s: the result is not a JSON object: %q", name, args, content)
	}
	return out, isError
}

// toolPid is the pid of the session's tool process, as it reads it itself.
func toolPid(t *testing.T, ts *toolSession) int {
	t.Helper()
	res, isErr := sessionCall(t, ts, context.Background(), "fs.read", `{"path":"/proc/self/stat"}`)
	c, _ := res["content"].(string)
	pid, err := strconv.Atoi(strings.Fields(c + " x")[0])
	if isErr || err != nil {
		t.Fatalf("the tool process's pid: %v", res)
	}
	return pid
}

// waitEnded waits until the session's process is reaped.
func waitEnded(t *testing.T, ts *toolSession) {
	t.Helper()
	ts.mu.Lock()
	p := ts.p
	ts.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool process was not reaped")
	}
}

// A run's calls share one tool process; killed between two calls, the
// next call starts another and works; killed during a call, that call is
// an error, nothing it started is left, and the next call works. Closed,
// no process of the uid is left.
func TestToolSessionProcessKilled(t *testing.T) {
	const uid = 1079
	s := toolSpec(t, uid)
	ownedFile(t, filepath.Join(s.Dir, "a.txt"), "hello", 0o644, uid)
	requireNoProcesses(t, "before", uid)
	ts := newToolSession(s)
	t.Cleanup(ts.close)

	first := toolPid(t, ts)
	for i := 0; i < 100; i++ { // the end of one call never reaches the process the next one uses
		if res, isErr := sessionCall(t, ts, context.Background(), "fs.stat", `{"path":"a.txt"}`); isErr {
			t.Fatalf("call %d of a run: %v", i+2, res)
		}
	}
	if again := toolPid(t, ts); again != first {
		t.Fatalf("the calls of a run ran in processes %d and %d, want one", first, again)
	}
	testkit.Must(t, unix.Kill(first, unix.SIGKILL))
	waitEnded(t, ts)
	res, isErr := sessionCall(t, ts, context.Background(), "fs.read", `{"path":"a.txt"}`)
	if isErr || res["content"] != "hello" {
		t.Errorf("the call after the process was killed between calls: %v", res)
	}
	second := toolPid(t, ts)
	if second == first {
		t.Errorf("the killed process %d still answers", first)
	}

	go func() {
		time.Sleep(500 * time.Millisecond)
		unix.Kill(second, unix.SIGKILL)
	}()
	// (A setsid escapee would stay here: outside a jail, the uid that kills
	// its own tool process may as well start one itself.)
	res, isErr = sessionCall(t, ts, context.Background(), "shell.exec", `{"command":"sleep 300 & sleep 300"}`)
	wantToolErrno(t, "the call whose process was killed", res, isErr, syscall.EIO)
	waitNoProcesses(t, "after the process was killed during a call", uid)
	res, isErr = sessionCall(t, ts, context.Background(), "shell.exec", `{"argv":["echo","again"]}`)
	if isErr || res["stdout"] != "again\n" {
		t.Errorf("the call after the process was killed during a call: %v", res)
	}
	ts.close()
	requireNoProcesses(t, "after close", uid)
}

// A run cancelled during a call ends its tool process with the call: no
// process of the uid is left once the call returns, before the run closes
// the session; a later call would start a new process.
func TestToolSessionCancelledMidCall(t *testing.T) {
	const uid = 1080
	s := toolSpec(t, uid)
	requireNoProcesses(t, "before", uid)
	ts := newToolSession(s)
	t.Cleanup(ts.close)
	toolPid(t, ts) // the process runs
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(500 * time.Millisecond); cancel() }()
	res, isErr := sessionCall(t, ts, ctx, "shell.exec", `{"command":"trap '' TERM; sleep 300 & setsid sleep 300 & sleep 300"}`)
	wantToolErrno(t, "a cancelled call", res, isErr, syscall.ECANCELED)
	requireNoProcesses(t, "after a cancelled call", uid)
	if res, isErr := sessionCall(t, ts, ctx, "fs.stat", `{"path":"."}`); !isErr {
		t.Errorf("a call of a cancelled run: %v", res)
	}
	requireNoProcesses(t, "after a call of the cancelled run", uid)
}

// A tool process idle for toolIdle is ended; the next call starts one.
func TestToolSessionIdle(t *testing.T) {
	const uid = 1081
	s := toolSpec(t, uid)
	requireNoProcesses(t, "before", uid)
	defer func(d time.Duration) { toolIdle = d }(toolIdle)
	toolIdle = 200 * time.Millisecond
	ts := newToolSession(s)
	t.Cleanup(ts.close)
	toolPid(t, ts)
	waitNoProcesses(t, "after the idle time", uid)
	toolPid(t, ts)
}

// shell.exec's command runs with RLIMIT_NPROC and no_new_privs, set in
// the child before exec, and the tool process itself with neither; a
// program the kernel cannot execute is an error with exec's errno, and
// leaves nothing.
func TestToolShellLimitsInTheChild(t *testing.T) {
	const uid = 1082
	s := toolSpec(t, uid)
	ownedFile(t, filepath.Join(s.Dir, "garbage"), "not a program\x00\x01", 0o755, uid)
	ts := newToolSession(s)
	t.Cleanup(ts.close)
	toolPid(t, ts) // the tool process runs: the server counts its threads too
	want := strconv.Itoa(uidTasks(uid) + toolNprocHeadroom)
	res, isErr := sessionCall(t, ts, context.Background(), "shell.exec", `{"command":"grep -E '^(Max processes|NoNewPrivs)' /proc/self/limits /proc/self/status"}`)
	out, _ := res["stdout"].(string)
	if isErr || !strings.Contains(out, "NoNewPrivs:\t1") || !strings.Contains(out, "Max processes") || !strings.Contains(out, " processes ") {
		t.Fatalf("the command's limits: %v", res)
	}
	if f := strings.Fields(out[strings.Index(out, "Max processes"):]); len(f) < 4 || f[2] != f[3] || absDiff(f[2], want) > 8 {
		t.Errorf("the command's RLIMIT_NPROC: %q, want about %s soft and hard", out, want)
	}
	// no_new_privs is a thread's: set in the child, every command has it
	// (set on a thread of the tool process, as before, 1 in 20 lacked it).
	for i := 0; i < 40; i++ {
		res, _ = sessionCall(t, ts, context.Background(), "shell.exec", `{"argv":["grep","NoNewPrivs","/proc/self/status"]}`)
		if res["stdout"] != "NoNewPrivs:\t1\n" {
			t.Fatalf("command %d: %v", i, res)
		}
	}
	res, _ = sessionCall(t, ts, context.Background(), "fs.read", `{"path":"/proc/self/limits"}`)
	if c, _ := res["content"].(string); !strings.Contains(c, "Max processes") || strings.Contains(strings.Split(c[strings.Index(c, "Max processes"):], "\n")[0], " "+want+" ") {
		t.Errorf("the tool process itself is limited: %v", res)
	}
	res, isErr = sessionCall(t, ts, context.Background(), "shell.exec", `{"argv":["./garbage"]}`)
	wantToolErrno(t, "exec of a file that is no program", res, isErr, syscall.ENOEXEC)
	res, isErr = sessionCall(t, ts, context.Background(), "shell.exec", `{"argv":["true"]}`)
	if isErr || res["exit_status"] != 0.0 {
		t.Errorf("true after a failed exec: %v", res)
	}
	ts.close()
	requireNoProcesses(t, "after close", uid)
}

// waitNoProcesses is requireNoProcesses once uid's processes had 10
// seconds to go: a SIGKILL is not a process's end at once.
func waitNoProcesses(t *testing.T, what string, uid uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(uidProcesses(uid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	requireNoProcesses(t, what, uid)
}

func absDiff(a, b string) int {
	x, _ := strconv.Atoi(a)
	y, _ := strconv.Atoi(b)
	if x > y {
		return x - y
	}
	return y - x
}

// In a jail too, a killed tool process fails only its call; the next call
// starts a new one in a new jail.
func TestToolSessionJailedProcessKilled(t *testing.T) {
	const uid = 1083
	s, _ := jailedToolSpec(t, uid)
	requireNoProcesses(t, "before", uid)
	ts := newToolSession(s)
	t.Cleanup(ts.close)
	toolPid(t, ts)
	left := uidProcesses(uid)
	if len(left) != 1 {
		t.Fatalf("%d processes of uid %d between calls, want the tool process", len(left), uid)
	}
	testkit.Must(t, unix.Kill(left[0], unix.SIGKILL))
	waitEnded(t, ts)
	res, isErr := sessionCall(t, ts, context.Background(), "shell.exec", `{"command":"echo again; id -u"}`)
	if isErr || res["stdout"] != "again\n1083\n" {
		t.Errorf("the call after the jailed process was killed: %v", res)
	}
	ts.close()
	requireNoProcesses(t, "after close", uid)
}
