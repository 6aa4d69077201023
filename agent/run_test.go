package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/cli"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
)

const testRunID = "ctx-0123456789abcdef0123456789abcdef"

// openTempDir is a t.TempDir that another uid can enter, for programs run
// as uid 1001.
func openTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// script writes an executable sh program and returns a definition for it.
func script(t *testing.T, abiName, body string) *def.Definition {
	t.Helper()
	dir := openTempDir(t)
	prog := filepath.Join(dir, "agent")
	testkit.WriteFile(t, prog, "#!/bin/sh\n"+body+"\n", 0o755)
	return &def.Definition{Kind: abi.KindAgent, Name: "t", Program: prog, Model: "acme/x", ABI: abiName, Isolation: def.IsolationNone}
}

func baseSpec(t *testing.T, d *def.Definition) Spec {
	return Spec{
		RunID: testRunID, Session: "default", Scope: "private", Def: d, Input: "hello world",
		Dir: openTempDir(t),
		Env: map[string]string{"PATH": "/usr/bin:/bin", "CTX_RUN_ID": testRunID, "CTX_AGENT": "t"},
	}
}

// run runs s to the end with a deadline that a hung child cannot outlast.
func run(t *testing.T, s Spec) (frames []*proto.Object, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok = Run(ctx, s, func(f *proto.Object) { frames = append(frames, f) })
	return frames, ok
}

func lines(frames []*proto.Object) []string {
	var out []string
	for _, f := range frames {
		out = append(out, strings.TrimSuffix(string(f.Line()), "\n"))
	}
	return out
}

func equalLines(t *testing.T, got []*proto.Object, want []string) {
	t.Helper()
	g := lines(got)
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
}

func TestRunEcho(t *testing.T) {
	d, err := def.Load(t.TempDir(), abi.KindModel, def.EchoModel)
	if err != nil {
		t.Fatal(err)
	}
	s := baseSpec(t, d)
	s.Input = "hello, 世界"
	frames, ok := run(t, s)
	if !ok {
		t.Fatal("echo failed")
	}
	equalLines(t, frames, []string{
		`{"type":"message","role":"assistant","content":[{"type":"text","text":"hello, 世界"}]}`,
		`{"type":"usage","model":"debug/echo","input_tokens":4,"output_tokens":4}`,
	})
}

func TestRunJSONL(t *testing.T) {
	d := script(t, def.ABIJSONL, `cat >/dev/null
cat <<'EOF'
{"type":"delta","text":"hi"}
{"type":"message","run":"`+testRunID+`","role":"assistant","content":[{"type":"text","text":"hi"}],"ts":"2020-01-01T00:00:00.000Z"}
{"type":"tool_call","id":"call-1","name":"fs.read","arguments":{"path":"/a"}}
{"type":"tool_result","tool_call_id":"call-1","content":"x","is_error":false}
{"type":"usage","model":"acme/x","input_tokens":1,"output_tokens":2}
{"type":"error","code":"EIO","message":"boom"}
not json
{"type":"delta","text":"x","run":"ctx-ffffffffffffffffffffffffffffffff"}
{"type":"start","id":"r"}
{"type":"done","status":"ok"}
{"type":"log","text":"x"}
{"text":"no type"}

{"type":"delta","text":"a","type":"delta"}
[1]
{"type":"delta","text":"last, no newline"}
EOF
printf '{"type":"delta","text":"end"}'`)
	frames, ok := run(t, baseSpec(t, d))
	if !ok {
		t.Fatal("run failed")
	}
	equalLines(t, frames, []string{
		`{"type":"delta","text":"hi"}`,
		`{"type":"message","role":"assistant","content":[{"type":"text","text":"hi"}]}`,
		`{"type":"tool_call","id":"call-1","name":"fs.read","arguments":{"path":"/a"}}`,
		`{"type":"tool_result","tool_call_id":"call-1","content":"x","is_error":false}`,
		`{"type":"usage","model":"acme/x","input_tokens":1,"output_tokens":2}`,
		`{"type":"error","code":"EIO","message":"boom"}`,
		`{"type":"error","code":"EINVAL","message":"dropped agent output line 7: line is not a JSON object"}`,
		`{"type":"error","code":"EINVAL","message":"dropped agent output line 8: it names another run (\"ctx-ffffffffffffffffffffffffffffffff\")"}`,
		`{"type":"error","code":"EINVAL","message":"dropped agent output line 9: only the server writes start frames"}`,
		`{"type":"error","code":"EINVAL","message":"dropped agent output line 10: only the server writes done frames"}`,
		`{"type":"error","code":"EINVAL","message":"dropped agent output line 11: unknown type \"log\""}`,
		`{"type":"error","code":"EINVAL","message":"dropped agent output line 12: no type"}`,
		`{"type":"error","code":"EINVAL","message":"dropped agent output line 14: duplicate key \"type\""}`,
		`{"type":"error","code":"EINVAL","message":"dropped agent output line 15: line is not a JSON object"}`,
		`{"type":"delta","text":"last, no newline"}`,
		`{"type":"delta","text":"end"}`,
	})
}

func TestRunStdin(t *testing.T) {
	d := script(t, def.ABIText, `tr a-z A-Z`)
	s := baseSpec(t, d)
	s.Input = strings.Repeat("abc\n", 100000) // larger than a pipe buffer
	frames, ok := run(t, s)
	last := frames[len(frames)-1]
	if !ok || last.Str("type") != proto.FrameMessage {
		t.Fatalf("ok=%v last=%s", ok, last.Line())
	}
	if got := messageText(t, last); got != strings.Repeat("ABC\n", 100000) {
		t.Errorf("message of %d bytes, want the upper-cased input", len(got))
	}
}

func messageText(t *testing.T, f *proto.Object) string {
	t.Helper()
	var content []struct{ Type, Text string }
	if err := json.Unmarshal(f.Raw("content"), &content); err != nil || len(content) != 1 || content[0].Type != "text" {
		t.Fatalf("bad message %s: %v", f.Line(), err)
	}
	return content[0].Text
}

func TestRunText(t *testing.T) {
	// "ö" is split across two writes to check deltas cut on rune boundaries.
	d := script(t, def.ABIText, `printf 'hello w\303'; sleep 0.3; printf '\266rld\n'`)
	frames, ok := run(t, baseSpec(t, d))
	if !ok || len(frames) < 2 {
		t.Fatalf("ok=%v frames=%q", ok, lines(frames))
	}
	var deltas []string
	for _, f := range frames[:len(frames)-1] {
		if f.Str("type") != proto.FrameDelta {
			t.Fatalf("unexpected frame %s", f.Line())
		}
		deltas = append(deltas, f.Str("text"))
	}
	if len(deltas) < 2 || strings.Join(deltas, "") != "hello wörld\n" || deltas[0] != "hello w" {
		t.Errorf("deltas = %q", deltas)
	}
	if got := messageText(t, frames[len(frames)-1]); got != "hello wörld\n" {
		t.Errorf("message text %q", got)
	}
}

func TestRunStderr(t *testing.T) {
	d := script(t, def.ABIJSONL, `echo one >&2; echo two >&2; echo '{"type":"delta","text":"x"}'; echo three >&2`)
	frames, ok := run(t, baseSpec(t, d))
	if !ok {
		t.Fatal("run failed")
	}
	var logs []string
	for _, f := range frames {
		if f.Str("type") == proto.FrameLog {
			if f.Str("stream") != "stderr" {
				t.Errorf("log frame %s", f.Line())
			}
			logs = append(logs, f.Str("text"))
		}
	}
	if strings.Join(logs, ",") != "one,two,three" || len(frames) != 4 {
		t.Errorf("frames %q", lines(frames))
	}
}

func TestRunStderrBound(t *testing.T) {
	// 1024 lines of 100 bytes: 655 fit in 64 KiB.
	d := script(t, def.ABIJSONL, `{ head -c 101376 /dev/zero | tr '\0' x | fold -w 99; echo; } >&2`)
	frames, ok := run(t, baseSpec(t, d))
	if !ok {
		t.Fatal("run failed")
	}
	kept, dropped := 0, 0
	for i, f := range frames {
		if f.Str("type") != proto.FrameLog {
			t.Fatalf("frame %s", f.Line())
		}
		if f.Has("dropped") {
			if i != len(frames)-1 {
				t.Error("dropped frame is not the last")
			}
			dropped, _ = strconv.Atoi(string(f.Raw("dropped")))
			continue
		}
		kept += len(f.Str("text")) + 1
	}
	if kept != 65500 || kept+dropped != 1024*99+1024 || kept > maxStderr {
		t.Errorf("kept %d dropped %d", kept, dropped)
	}
}

func TestRunExitStatus(t *testing.T) {
	d := script(t, def.ABIJSONL, `echo '{"type":"delta","text":"partial"}'; exit 3`)
	frames, ok := run(t, baseSpec(t, d))
	if ok {
		t.Fatal("exit 3 reported as success")
	}
	equalLines(t, frames, []string{
		`{"type":"delta","text":"partial"}`,
		`{"type":"error","code":"EIO","message":"run: EIO: agent program exited with status 3","exit_code":3}`,
	})
}

func TestRunExactEnv(t *testing.T) {
	d := &def.Definition{Kind: abi.KindAgent, Name: "t", Program: "/usr/bin/env", ABI: def.ABIText,
		Env: []string{"FOO=bar=baz", "PATH=/opt/bin", "CTX_AGENT=forged", "CTX_CONTEXT_WINDOW_TOKENS=1"}, WindowDef: def.WindowDef{Window: 1000}}
	s := baseSpec(t, d)
	t.Setenv("LEAK", "1")
	frames, ok := run(t, s)
	if !ok {
		t.Fatalf("run failed: %q", lines(frames))
	}
	got := strings.Split(strings.TrimSpace(messageText(t, frames[len(frames)-1])), "\n")
	sort.Strings(got)
	// SPEC 18: a window of 1000 leaves the reply a quarter, the rest is the compaction point.
	want := []string{"CTX_AGENT=t", "CTX_CONTEXT_COMPACTION_TOKENS=750", "CTX_CONTEXT_WINDOW_TOKENS=1000", "CTX_RUN_ID=" + testRunID, "FOO=bar=baz", "PATH=/opt/bin"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("env = %q, want %q", got, want)
	}
}

func TestRunAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	d := script(t, def.ABIText, `id -u; id -g; id -G; pwd`)
	s := baseSpec(t, d)
	s.Uid, s.Gid = 1001, 1001
	frames, ok := run(t, s)
	if !ok {
		t.Fatalf("run failed: %q", lines(frames))
	}
	if got := messageText(t, frames[len(frames)-1]); got != "1001\n1001\n1001\n"+s.Dir+"\n" {
		t.Errorf("id output %q", got)
	}
}

// startAsync runs s in the background; emit fails the test once stopped is
// set, and frames arrive on the returned channel.
func startAsync(t *testing.T, ctx context.Context, s Spec, stopped *atomic.Bool) (<-chan *proto.Object, <-chan bool) {
	frames := make(chan *proto.Object, 100)
	result := make(chan bool, 1)
	go func() {
		result <- Run(ctx, s, func(f *proto.Object) {
			if stopped.Load() {
				t.Errorf("emit after cancel: %s", f.Line())
			}
			frames <- f
		})
	}()
	return frames, result
}

func waitFrame(t *testing.T, frames <-chan *proto.Object) *proto.Object {
	t.Helper()
	select {
	case f := <-frames:
		return f
	case <-time.After(10 * time.Second):
		t.Fatal("no frame within 10 s")
		return nil
	}
}

// readPid reads a pid the program wrote, and makes sure it dies with the test.
func readPid(t *testing.T, p string) int {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		t.Fatalf("pid file %q", data)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// pidSpec is the Spec of a jsonl program of body that writes a pid to
// $PIDFILE, and the file it writes.
func pidSpec(t *testing.T, body string) (s Spec, pidFile string) {
	s = baseSpec(t, script(t, def.ABIJSONL, body))
	s.Env["PIDFILE"] = filepath.Join(s.Dir, "pid")
	return s, s.Env["PIDFILE"]
}

// cancelAfterStart runs the program of body (pidSpec) in the background,
// with 30 s to live, and cancels it once its first frame has come; a
// frame after the cancel fails the test. It returns that frame, the pid
// the program wrote before it, when the cancel came and the run's result.
func cancelAfterStart(t *testing.T, body string) (first *proto.Object, pid int, cancelled time.Time, result <-chan bool) {
	t.Helper()
	s, pidFile := pidSpec(t, body)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	var stopped atomic.Bool
	frames, result := startAsync(t, ctx, s, &stopped)
	first = waitFrame(t, frames)
	pid = readPid(t, pidFile)
	cancelled = time.Now()
	stopped.Store(true)
	cancel()
	return first, pid, cancelled, result
}

// gone reports whether pid no longer runs; a zombie left for a
// non-reaping init counts as gone.
func gone(pid int) bool {
	if unix.Kill(pid, 0) == unix.ESRCH {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if gone(pid) {
			return
		}
	}
	t.Errorf("pid %d still alive after %s", pid, within)
}

func waitResult(t *testing.T, result <-chan bool, within time.Duration) bool {
	t.Helper()
	select {
	case ok := <-result:
		return ok
	case <-time.After(within):
		t.Fatalf("Run did not return within %s", within)
		return false
	}
}

func TestRunCancel(t *testing.T) {
	first, grandchild, start, result := cancelAfterStart(t, `sleep 300 & echo $! > "$PIDFILE"; echo '{"type":"delta","text":"started"}'; wait`)
	if first.Str("text") != "started" {
		t.Fatalf("first frame %s", first.Line())
	}
	if waitResult(t, result, 5*time.Second) {
		t.Error("cancelled run reported success")
	}
	t.Logf("Run returned %s after cancel", time.Since(start))
	waitGone(t, grandchild, 3*time.Second)
	if el := time.Since(start); el > killGrace {
		t.Errorf("a program that dies on SIGTERM took %s", el)
	}
}

func TestRunCancelIgnoresTerm(t *testing.T) {
	_, pid, start, result := cancelAfterStart(t, `trap 'echo "{\"type\":\"delta\",\"text\":\"got TERM\"}"' TERM
echo $$ > "$PIDFILE"
echo '{"type":"delta","text":"started"}'
while :; do sleep 0.05; done`)
	waitResult(t, result, 10*time.Second)
	if el := time.Since(start); el < killGrace-100*time.Millisecond {
		t.Errorf("run ended after %s, before the SIGKILL grace", el)
	}
	waitGone(t, pid, 3*time.Second)
}

func TestRunTimeout(t *testing.T) {
	d := script(t, def.ABIJSONL, `echo '{"type":"delta","text":"started"}'; exec sleep 300`)
	d.Timeout = time.Second
	start := time.Now()
	frames, ok := run(t, baseSpec(t, d))
	if ok || time.Since(start) > 5*time.Second {
		t.Fatalf("ok=%v after %s", ok, time.Since(start))
	}
	last := frames[len(frames)-1]
	if proto.FrameErrno(last) != syscall.ETIMEDOUT || frames[0].Str("text") != "started" {
		t.Errorf("frames %q", lines(frames))
	}
}

func TestRunRefusals(t *testing.T) {
	chroot := script(t, def.ABIJSONL, `echo should not run`)
	chroot.Isolation = def.IsolationChroot
	noProg := &def.Definition{Kind: abi.KindAgent, Name: "t", Model: "acme/x", ABI: def.ABIJSONL, Isolation: def.IsolationNone}
	badDir := script(t, def.ABIJSONL, `true`)
	for _, c := range []struct {
		name string
		d    *def.Definition
		dir  string
		want syscall.Errno
	}{
		{"chroot", chroot, "", syscall.ENOTSUP},
		{"no program", noProg, "", syscall.ENOENT},
		{"missing dir", badDir, "/nonexistent/dir", syscall.ENOENT},
		{"no definition", nil, "", syscall.EINVAL},
	} {
		s := baseSpec(t, c.d)
		if c.dir != "" {
			s.Dir = c.dir
		}
		frames, ok := run(t, s)
		if ok || len(frames) != 1 || proto.FrameErrno(frames[0]) != c.want {
			t.Errorf("%s: ok=%v frames=%q", c.name, ok, lines(frames))
		}
	}
}

func TestRunCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, _ := def.Load(t.TempDir(), abi.KindModel, def.EchoModel)
	if Run(ctx, baseSpec(t, d), func(f *proto.Object) { t.Errorf("emit %s", f.Line()) }) {
		t.Error("cancelled run succeeded")
	}
}

func TestRunKillsLeftoversOnExit(t *testing.T) {
	s, pidFile := pidSpec(t, `sleep 300 & echo $! > "$PIDFILE"; echo '{"type":"delta","text":"bye"}'`)
	start := time.Now()
	frames, ok := run(t, s)
	if !ok || len(frames) != 1 || time.Since(start) > drainGrace {
		t.Errorf("ok=%v frames=%q after %s", ok, lines(frames), time.Since(start))
	}
	waitGone(t, readPid(t, pidFile), 3*time.Second)
}

func TestRunEscapedProcessCannotHoldRun(t *testing.T) {
	// setsid leaves the run's group, so only the drain deadline ends the run.
	s, pidFile := pidSpec(t, `setsid sh -c 'echo $$ > "$PIDFILE"; while :; do sleep 1; done' &
while [ ! -s "$PIDFILE" ]; do sleep 0.01; done
echo '{"type":"delta","text":"bye"}'`)
	start := time.Now()
	frames, ok := run(t, s)
	readPid(t, pidFile) // killed by its cleanup
	if el := time.Since(start); !ok || len(frames) != 1 || el < drainGrace || el > drainGrace+2*time.Second {
		t.Errorf("ok=%v frames=%q after %s", ok, lines(frames), el)
	}
}

func TestRunKilledBySignal(t *testing.T) {
	d := script(t, def.ABIJSONL, `kill -KILL $$`)
	frames, ok := run(t, baseSpec(t, d))
	if ok || len(frames) != 1 || frames[0].Str("signal") != "SIGKILL" || proto.FrameErrno(frames[0]) != syscall.EIO {
		t.Errorf("ok=%v frames=%q", ok, lines(frames))
	}
}

// TestRunCLI: a cli agent's program gets the invocation's arguments, the
// key in the CLI's variable (a definition's env line cannot replace it),
// and its stdout goes through the adapter's parser; the key's value is
// redacted from every frame, and the session id the CLI names is handed
// to Named.
func TestRunCLI(t *testing.T) {
	const key, id = "sk-unit-7d1e", "0f19e0aa-1111-4222-8333-444455556666"
	t.Setenv("CTXFS_UNIT_KEY", key)
	d := script(t, def.ABIJSONL, `printf '{"type":"system","subtype":"init","session_id":"%s","model":"m"}\n' `+id+`
printf '{"type":"assistant","session_id":"%s","message":{"content":[{"type":"text","text":"key %s args %s"}]}}\n' `+id+` "$ANTHROPIC_API_KEY" "$*"
printf '{"type":"result","subtype":"success","is_error":false,"session_id":"%s","result":"x","usage":{"input_tokens":3,"output_tokens":2}}\n' `+id)
	d.Env = []string{"ANTHROPIC_API_KEY=forged"}
	a, _ := cli.Lookup(cli.ClaudeCode)
	d.CLI = &def.CLIDef{Adapter: a, KeySource: def.KeySource{KeyEnv: "CTXFS_UNIT_KEY"}}
	inv, err := d.CLIInvocation("")
	testkit.Must(t, err)
	var named string
	s := baseSpec(t, d)
	s.CLI = &CLIRun{Invocation: inv, Named: func(got string) { named = got }}
	frames, ok := run(t, s)
	all := strings.Join(lines(frames), "\n")
	if !ok || named != id || strings.Contains(all, key) || strings.Contains(all, "forged") ||
		!strings.Contains(all, "key [key redacted] args "+strings.Join(inv.Args, " ")) || !strings.Contains(all, `"type":"usage"`) {
		t.Fatalf("ok %v, named %q, frames:\n%s", ok, named, all)
	}
	// Resumed: the id goes back on the command line; the same id is not named again.
	inv, err = d.CLIInvocation(id)
	testkit.Must(t, err)
	named = ""
	s.CLI = &CLIRun{Resume: id, Invocation: inv, Named: func(got string) { named = got }}
	frames, ok = run(t, s)
	if all := strings.Join(lines(frames), "\n"); !ok || named != "" || !strings.Contains(all, "--resume "+id) {
		t.Fatalf("resumed: ok %v, named %q, frames:\n%s", ok, named, all)
	}
}
