package session

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/runsfile"
)

// sleeper is an agent whose program writes one line and sleeps.
const sleeper = "#!/bin/sh\necho working\nexec sleep 60\n"

func (env *testEnv) begin(c layout.Caller, t Target, line string) *Reply {
	env.t.Helper()
	req, err := proto.ParseRequest([]byte(line))
	testkit.Must(env.t, err)
	r, err := env.e.Begin(context.Background(), c, t, req)
	testkit.Must(env.t, err)
	env.t.Cleanup(r.Close)
	return r
}

func next(t *testing.T, r *Reply) *proto.Object {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := r.Next(ctx)
	testkit.Must(t, err)
	return f
}

func TestCancelRunningAndStale(t *testing.T) {
	env := newEnv(t)
	env.define("slow", map[string]string{"program": sleeper, "abi": "text"})
	slow := Target{Kind: abi.KindAgent, Owner: "slow"}
	r := env.begin(root0, slow, `{"op":"send","id":"c1","input":"go"}`)
	start := next(t, r)
	run := start.Str("run")
	for f := next(t, r); f.Str("type") != "delta"; f = next(t, r) {
	}
	st := env.send(root0, slow, `{"op":"status"}`)
	if !strings.Contains(string(st[0].Line()), `"phase":"running"`) || st[0].Str("state") != "active" {
		t.Fatalf("status while running: %s", st[0].Line())
	}
	got := env.send(root0, slow, `{"op":"cancel","id":"`+run+`"}`)
	if string(got[0].Line()) != `{"type":"cancel","run":"`+run+`","cancelled":true}`+"\n" {
		t.Fatalf("cancel reply %s", got[0].Line())
	}
	frames, err := drain(r)
	testkit.Must(t, err)
	last := frames[len(frames)-1]
	if last.Str("type") != "done" || last.Str("status") != "cancelled" {
		t.Fatalf("last frame %s", last.Line())
	}
	dir := env.sessDir("home/0", "slow", "default")
	if s := env.stored(filepath.Join(dir, "state")); s != "cancelled\n" {
		t.Fatalf("state %q", s)
	}
	// Cancelling it again, by run id or client id, is stale and recorded.
	for _, id := range []string{run, "c1"} {
		got = env.send(root0, slow, `{"op":"cancel","id":"`+id+`"}`)
		want := `{"type":"cancel","run":"` + run + `","cancelled":false,"stale":true}` + "\n"
		if string(got[0].Line()) != want {
			t.Fatalf("stale cancel of %s: %s", id, got[0].Line())
		}
	}
	if n := strings.Count(readFile(t, filepath.Join(dir, "events.jsonl")), `"stale":true`); n != 2 {
		t.Fatalf("%d stale cancel events recorded, want 2", n)
	}
}

func TestQueuedRunsAreVisibleAndCancellable(t *testing.T) {
	env := newEnv(t)
	env.define("slow", map[string]string{"program": sleeper, "abi": "text"})
	slow := Target{Kind: abi.KindAgent, Owner: "slow"}
	replies := map[string]*Reply{} // by run id
	for i := 0; i < runSlots+1; i++ {
		r := env.begin(root0, slow, `{"op":"send","id":"c`+strconv.Itoa(i)+`","input":"go"}`)
		replies[next(t, r).Str("run")] = r
	}
	// Which run waits is up to the scheduler: find it in the status.
	var queued string
	deadline := time.Now().Add(20 * time.Second)
	for queued == "" {
		st := env.send(root0, slow, `{"op":"status"}`)
		var status struct {
			Runs []struct{ Run, Phase string }
		}
		testkit.Must(t, json.Unmarshal(st[0].Line(), &status))
		running, waiting := 0, []string{}
		for _, r := range status.Runs {
			switch r.Phase {
			case "running":
				running++
			case "queued":
				waiting = append(waiting, r.Run)
			}
		}
		if running == runSlots && len(waiting) == 1 {
			queued = waiting[0]
		} else if time.Now().After(deadline) {
			t.Fatalf("status never showed %d running and one queued: %s", runSlots, st[0].Line())
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	env.send(root0, slow, `{"op":"cancel","id":"`+queued+`"}`)
	frames, _ := drain(replies[queued])
	if l := frames[len(frames)-1]; l.Str("status") != "cancelled" {
		t.Fatalf("queued run ended %s", l.Line())
	}
	for run := range replies {
		if run != queued {
			env.send(root0, slow, `{"op":"cancel","id":"`+run+`"}`)
		}
	}
}

func TestResume(t *testing.T) {
	env := newEnv(t)
	a := env.send(root0, coder(), `{"op":"send","id":"a","input":"one"}`)
	b := env.send(root0, coder(), `{"op":"send","id":"b","input":"two"}`)
	all := env.send(root0, coder(), `{"op":"resume"}`)
	if len(all) != 12 {
		t.Fatalf("resume without after: %d frames (%s)", len(all), types(all))
	}
	after := env.send(root0, coder(), `{"op":"resume","after":"`+a[0].Str("run")+`"}`)
	if types(after) != "start,state,message,usage,done,state" || after[0].Str("run") != b[0].Str("run") {
		t.Fatalf("resume after a: %s", types(after))
	}
	_, err := env.do(root0, coder(), `{"op":"resume","after":"ctx-00000000000000000000000000000000"}`)
	testkit.WantErrno(t, "resume after an unknown run", err, syscall.ENOENT)
}

func TestInterruptedRunIsClosedAtStart(t *testing.T) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"a","input":"one"}`)
	dir := env.sessDir("home/0", "coder", "default")
	ref := coderDefault()
	// What a crash mid-run leaves: a start without done, and a marker.
	run, _ := abi.NewRunID()
	start := proto.NewObject("type", "start", "id", run, "run", run, "client_id", "b", "session", "default", "scope", "private", "cwd", "/", "ts", abi.TS(time.Now()))
	s, release, err := env.e.lookup(ref)
	testkit.Must(t, err)
	testkit.Must(t, s.appendEvents(start)) // the server's own record: the mount refuses a start
	release()
	env.e.running.Start(run, ref.Rel())
	env.e.Close()
	env.open()
	events := readFile(t, filepath.Join(dir, "events.jsonl"))
	if !strings.Contains(events, `{"type":"error","run":"`+run+`","code":"EINTR"`) || !strings.Contains(events, `{"type":"done","run":"`+run+`","status":"error"`) {
		t.Fatalf("interrupted run not closed:\n%s", events)
	}
	if s := env.stored(filepath.Join(dir, "state")); s != "error\n" {
		t.Fatalf("state %q", s)
	}
	if got := runsfile.Interrupted(env.e.admin); len(got) != 0 {
		t.Fatalf("the new journal still names interrupted sessions: %v", got)
	}
}

// Concurrent sends to one session: every run recorded once, lines never
// interleaved, and one client id raced by many senders runs once.
func TestConcurrentSends(t *testing.T) {
	env := newEnv(t)
	var wg sync.WaitGroup
	runs := make(chan string, 64)
	for i := 0; i < 16; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			f, err := env.do(root0, coder(), `{"op":"send","id":"c`+strconv.Itoa(i)+`","input":"hi"}`)
			if err == nil {
				runs <- f[0].Str("run")
			}
		}(i)
		go func() {
			defer wg.Done()
			f, err := env.do(root0, coder(), `{"op":"send","id":"same","input":"hi"}`)
			if err == nil {
				runs <- f[0].Str("run")
			}
		}()
	}
	wg.Wait()
	close(runs)
	seen := map[string]int{}
	for r := range runs {
		seen[r]++
	}
	if len(seen) != 17 {
		t.Fatalf("%d distinct runs, want 17", len(seen))
	}
	events := readFile(t, filepath.Join(env.sessDir("home/0", "coder", "default"), "events.jsonl"))
	if n := strings.Count(events, `"type":"start"`); n != 17 {
		t.Fatalf("%d start events, want 17", n)
	}
	for _, line := range strings.Split(strings.TrimSpace(events), "\n") {
		if abi.CheckLogLine([]byte(line)) != nil {
			t.Fatalf("bad line %q", line)
		}
	}
}

// A derived file whose write fails (here: something not a file where its
// spare twin goes) is written again once it can be: state ends as the
// logs say, without the session loading again.
func TestDerivedFileIsWrittenAgain(t *testing.T) {
	env := newEnv(t)
	env.send(root0, coder(), `{"op":"send","id":"c1","input":"one"}`)
	dir := env.sessDir("home/0", "coder", "default")
	ref := coderDefault()
	testkit.Must(t, env.e.WriteFile(root0, ref, abi.FileState, []byte("idle\n")))
	spare := filepath.Join(dir, ".state.spare")
	os.Remove(spare)                        // there after a RENAME_EXCHANGE, gone after a rename over (storefs.Swap)
	testkit.Must(t, os.Mkdir(spare, 0o700)) // the next state write fails
	env.send(root0, coder(), `{"op":"send","id":"c2","input":"two"}`)
	env.e.derived.Flush("", false) // the write behind, which fails
	if st := readFile(t, filepath.Join(dir, "state")); st != "idle\n" {
		t.Fatalf("state %q: the failed write was not failed", st)
	}
	testkit.Must(t, os.Remove(spare))
	deadline := time.Now().Add(5 * time.Second)
	for readFile(t, filepath.Join(dir, "state")) != "done\n" {
		if time.Now().After(deadline) {
			t.Fatalf("state is %q, not done, after its failed write", readFile(t, filepath.Join(dir, "state")))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A run that streams more than a run may is stopped: an EFBIG error, done
// error, state error, all recorded; the program is killed.
func TestRunStreamIsBounded(t *testing.T) {
	old := maxRunStream
	maxRunStream = 64 << 10
	t.Cleanup(func() { maxRunStream = old })
	env := newEnv(t)
	env.define("flood", map[string]string{"abi": "jsonl",
		"program": "#!/bin/sh\nwhile :; do printf '{\"type\":\"delta\",\"text\":\"%01000d\"}\\n' 0; done\n"})
	frames := env.send(root0, Target{Kind: abi.KindAgent, Owner: "flood"}, `{"op":"send","id":"f1","input":"go"}`)
	last := frames[len(frames)-1]
	if last.Str("type") != "done" || last.Str("status") != "error" {
		t.Fatalf("last frame %s", last.Line())
	}
	events := readFile(t, filepath.Join(env.sessDir("home/0", "flood", "default"), "events.jsonl"))
	if !strings.Contains(events, `"code":"EFBIG"`) || !strings.Contains(lastLines(events, 1), `"state":"error"`) {
		t.Fatalf("the overflow is not recorded:\n%s", lastLines(events, 3))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
