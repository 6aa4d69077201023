package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// unchanged is testkit.Same without stopping the test: it reports each
// difference between two testkit.Snapshots and goes on, so that one
// failing check does not hide the others.
func unchanged(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	if diffs := testkit.Diff(before, after); len(diffs) > 0 {
		t.Errorf("%s wrote:\n%s", what, strings.Join(diffs, "\n"))
	}
}

// wantEIOFrames fails unless a request was refused with EIO before it
// started: one error frame, code EIO.
func wantEIOFrames(t testing.TB, what string, frames []frame) {
	t.Helper()
	if len(frames) != 1 || frames[0]["type"] != "error" || frames[0]["code"] != "EIO" {
		t.Errorf("%s: %v, want one error frame with code EIO", what, frames)
	}
}

// TestSealHoles: the store-integrity holes of issue 6. Each refusal is
// EIO, writes nothing in the session (byte-for-byte snapshots of its
// directory, seals and spares included), and fsck names the damage. Error
// frames never show the store's host path.
func TestSealHoles(t *testing.T) {
	requireFUSE(t)
	type refusal struct {
		s      *server
		frames []frame
	}
	var refused []refusal // every refused send, for the last subtest

	t.Run("seal-deleted-mounted", func(t *testing.T) {
		s := newFuseServer(t)
		s.send("a", "c1", "hello")
		s.send("a", "c2", "again")
		settle()
		dir := s.sessionDir(0, "coder", "a")
		seal := filepath.Join(dir, ".seal", "messages.jsonl")
		testkit.Must(t, os.Remove(seal))
		before := testkit.Snapshot(t, dir, nil)
		frames := s.mustRequest("coder", `{"op":"send","id":"c3","session":"a","input":"more"}`)
		wantEIOFrames(t, "send after the seal was deleted", frames)
		refused = append(refused, refusal{s, frames})
		frames = s.mustRequest("coder", `{"op":"send","id":"c2","session":"a","input":"again"}`)
		wantEIOFrames(t, "replay after the seal was deleted", frames)
		refused = append(refused, refusal{s, frames})
		err := appendMnt(s.mnt(sessRel("a")+"/messages.jsonl"), `{"role":"user","content":"by hand"}`+"\n")
		testkit.WantErrno(t, "append through the mount after the seal was deleted", err, syscall.EIO)
		time.Sleep(50 * time.Millisecond) // a release records after the close
		unchanged(t, "sends and an append to a session whose seal was deleted", before, testkit.Snapshot(t, dir, nil))

		// The events seal of another session, and an append through the
		// mount as the first thing after the deletion.
		s.send("e", "e1", "hello")
		settle()
		dirE := s.sessionDir(0, "coder", "e")
		sealE := filepath.Join(dirE, ".seal", "events.jsonl")
		testkit.Must(t, os.Remove(sealE))
		beforeE := testkit.Snapshot(t, dirE, nil)
		err = appendMnt(s.mnt(sessRel("e")+"/events.jsonl"), `{"type":"note","text":"by hand"}`+"\n")
		testkit.WantErrno(t, "first append through the mount after the events seal was deleted", err, syscall.EIO)
		frames = s.mustRequest("coder", `{"op":"send","id":"e2","session":"e","input":"more"}`)
		wantEIOFrames(t, "send after the events seal was deleted", frames)
		refused = append(refused, refusal{s, frames})
		time.Sleep(50 * time.Millisecond)
		unchanged(t, "an append and a send to a session whose events seal was deleted", beforeE, testkit.Snapshot(t, dirE, nil))

		out, code := s.fsck()
		if code != 1 || !fsckNames(out, seal) || !fsckNames(out, sealE) {
			t.Errorf("fsck: exit %d, want 1 and lines naming %s and %s:\n%s", code, seal, sealE, out)
		}
	})

	t.Run("log-seal-swapped-stopped", func(t *testing.T) {
		s := newFuseServer(t)
		s.send("a", "a1", "alpha")
		s.send("b", "b1", "beta one")
		s.send("b", "b2", "beta two")
		settle()
		s.kill(s.cmd, syscall.SIGTERM)
		dirA, dirB := s.sessionDir(0, "coder", "a"), s.sessionDir(0, "coder", "b")
		for _, f := range []string{"messages.jsonl", ".seal/messages.jsonl"} {
			tmp := filepath.Join(dirA, f+".swap")
			testkit.Must(t, os.Rename(filepath.Join(dirA, f), tmp))
			testkit.Must(t, os.Rename(filepath.Join(dirB, f), filepath.Join(dirA, f)))
			testkit.Must(t, os.Rename(tmp, filepath.Join(dirB, f)))
		}
		s.start()
		beforeA, beforeB := testkit.Snapshot(t, dirA, nil), testkit.Snapshot(t, dirB, nil)
		for _, r := range []struct{ session, id, input string }{{"a", "a2", "more"}, {"b", "b3", "more"}, {"a", "a1", "alpha"}} {
			frames := s.mustRequest("coder", fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"input":%q}`, r.id, r.session, r.input))
			wantEIOFrames(t, fmt.Sprintf("send %s to %s after the swap", r.id, r.session), frames)
			refused = append(refused, refusal{s, frames})
		}
		err := appendMnt(s.mnt(sessRel("a")+"/messages.jsonl"), `{"role":"user","content":"by hand"}`+"\n")
		testkit.WantErrno(t, "append through the mount after the swap", err, syscall.EIO)
		time.Sleep(50 * time.Millisecond)
		unchanged(t, "sends and an append to a swapped session a", beforeA, testkit.Snapshot(t, dirA, nil))
		unchanged(t, "sends to a swapped session b", beforeB, testkit.Snapshot(t, dirB, nil))
		out, code := s.fsck()
		if code != 1 {
			t.Errorf("fsck after the swap: exit %d, want 1:\n%s", code, out)
		}
		for _, dir := range []string{dirA, dirB} {
			if fsckLine(out, dir+"/", "bound to another session or file") == "" {
				t.Errorf("fsck does not say that %s holds a log bound to another session or file:\n%s", dir, out)
			}
		}
	})

	t.Run("log-deleted-stopped", func(t *testing.T) {
		s := newFuseServer(t)
		s.send("c", "c1", "hello")
		settle()
		s.kill(s.cmd, syscall.SIGTERM)
		dir := s.sessionDir(0, "coder", "c")
		log := filepath.Join(dir, "messages.jsonl")
		testkit.Must(t, os.Remove(log))
		s.start()
		before := testkit.Snapshot(t, dir, nil)
		frames := s.mustRequest("coder", `{"op":"send","id":"c2","session":"c","input":"more"}`)
		if errorCode(frames) == "ENOENT" {
			t.Errorf("send to a session whose log is missing: ENOENT, want EIO (unprovable history): %v", frames)
		}
		wantEIOFrames(t, "send to a session whose log is missing", frames)
		refused = append(refused, refusal{s, frames})
		time.Sleep(50 * time.Millisecond)
		unchanged(t, "a send to a session whose log is missing", before, testkit.Snapshot(t, dir, nil))
		if _, err := os.Lstat(log); err == nil {
			t.Errorf("the missing log was recreated")
		}
		out, code := s.fsck()
		if code != 1 || fsckLine(out, log+": ", "log file is missing") == "" {
			t.Errorf("fsck: exit %d, want 1 and %q:\n%s", code, log+": log file is missing", out)
		}
	})

	t.Run("frames-hide-store", func(t *testing.T) {
		n := 0
		for _, r := range refused {
			for _, f := range r.frames {
				if f["type"] == "error" {
					n++
					t.Logf("%v", f)
				}
			}
			checkHidesStore(t, r.s, "a refused send", r.frames)
		}
		if n == 0 {
			t.Fatal("no error frame of a refused send to look at")
		}
	})
}
