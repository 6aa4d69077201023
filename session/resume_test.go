package session

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
)

// TestResumeNeverRepeatsAFrame resumes a session over and over while runs
// start in it: a frame is either in the recorded part of a reply or in its
// live part, never in both (the start frame of a run that had just become
// active was once in both).
func TestResumeNeverRepeatsAFrame(t *testing.T) {
	env := newEnv(t)
	var dup string
	var mu sync.Mutex
	testkit.Beside(2, func() {
		for i := 0; i < 60; i++ {
			env.send(root0, coder(), fmt.Sprintf(`{"op":"send","id":"c%d","input":"x"}`, i))
		}
	}, func() bool {
		frames, err := env.do(root0, coder(), `{"op":"resume"}`)
		if err != nil {
			return true // the session does not exist yet
		}
		seen := map[string]bool{}
		for _, f := range frames {
			l := string(f.Line())
			if seen[l] {
				mu.Lock()
				dup = l
				mu.Unlock()
			}
			seen[l] = true
		}
		return true
	})
	if dup != "" {
		t.Fatalf("a resume reply repeated %s", dup)
	}
}

// TestResumeReadsTheLogAsRead: a resume's recorded frames are read from
// events.jsonl as its reply is read, not parsed into it at once: eight
// unread replies of a 16 MiB log hold almost nothing (each once held the
// whole log parsed, several times its size, for a client that may never
// read it), and a reply read whole is every line of the log, in order;
// with "after", every line after that run's last.
func TestResumeReadsTheLogAsRead(t *testing.T) {
	env := newEnv(t)
	u := layout.Caller{Uid: 1000, Gid: 1000, Pid: 1}
	env.send(u, coder(), `{"op":"send","id":"c","input":"hi"}`)
	ref := layout.Ref{Container: layout.Container{Home: "home/1000", Kind: abi.KindAgent, Owner: "coder"}, Name: "default"}
	pad := strings.Repeat("k", 60<<10)
	for i := range 256 {
		testkit.Must(t, env.e.AppendLog(u, ref, abi.FileEvents, []byte(fmt.Sprintf(`{"type":"note","n":%d,"pad":%q}`+"\n", i, pad))))
	}
	begin := func(line string) *Reply {
		req, err := proto.ParseRequest([]byte(line))
		testkit.Must(t, err)
		r, err := env.e.Begin(context.Background(), u, coder(), req)
		testkit.Must(t, err)
		return r
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var unread []*Reply
	for range 8 {
		unread = append(unread, begin(`{"op":"resume"}`))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if held := int64(after.HeapAlloc) - int64(before.HeapAlloc); held > 4<<20 {
		t.Errorf("8 unread resumes of a 16 MiB events.jsonl hold %d KiB", held>>10)
	}
	for _, r := range unread {
		r.Close()
	}
	log := env.stored(filepath.Join(env.sessDir("home/1000", "coder", "default"), abi.FileEvents))
	frames, err := drain(begin(`{"op":"resume"}`))
	testkit.Must(t, err)
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	if len(frames) != len(lines) {
		t.Fatalf("%d frames of a log of %d lines", len(frames), len(lines))
	}
	run := ""
	for i, f := range frames {
		if strings.TrimSuffix(string(f.Line()), "\n") != lines[i] {
			t.Fatalf("frame %d: %s, the log's line: %s", i, f.Line(), lines[i])
		}
		if f.Str("type") == proto.FrameDone {
			run = f.Str("run")
		}
	}
	frames, err = drain(begin(fmt.Sprintf(`{"op":"resume","after":%q}`, run)))
	testkit.Must(t, err)
	if len(frames) != 256 || frames[0].Str("type") != "note" || frames[255].Line() == nil || !strings.Contains(string(frames[255].Line()), `"n":255`) {
		t.Fatalf("after %s: %d frames, want the 256 notes", run, len(frames))
	}
}
