package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// fsckEnv runs `ctxfs fsck ARGS` with only env set (no CTXFS_STORE unless
// given), and returns its stdout, stderr and exit status.
func fsckEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(ctxfsBin, append([]string{"fsck"}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/"}, env...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errs.String(), code
}

// TestFsckSaysWhatItChecked: without --store and $CTXFS_STORE, fsck checks
// the store of the server of the mount root (its pid file names it), and
// says so; a clean store is said "clean"; --repair says what to do about a
// log whose bytes differ from what its seal vouches for, which it never
// rewrites.
func TestFsckSaysWhatItChecked(t *testing.T) {
	s := newServer(t)
	s.mustRequest("coder", `{"op":"send","id":"c1","session":"s1","input":"hello"}`)
	out, errs, code := fsckEnv(t, []string{"CTX_ROOT=" + s.root})
	if code != 0 || out != "clean\n" || !strings.Contains(errs, s.store+", the store of the server of "+s.root) {
		t.Fatalf("fsck of the running server's store: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}

	s.kill(s.cmd, syscall.SIGTERM)
	log := filepath.Join(s.sessionDir(0, "coder", "s1"), "messages.jsonl")
	b, err := os.ReadFile(log)
	testkit.Must(t, err)
	b[len(b)-3] ^= 0x20 // the same length, another byte: a digest mismatch
	testkit.Must(t, os.WriteFile(log, b, 0o600))
	before := hostSnapshot(t, s.store)
	out, _, code = fsckEnv(t, nil, "--store", s.store, "--repair")
	line := fsckLine(out, log+": ", "does not match")
	if code != 1 || !strings.Contains(line, "--repair does not rewrite history: stop the server and put back the bytes the seal vouches for (from a backup)") {
		t.Errorf("fsck --repair of a digest mismatch: exit %d, want 1 and what to do:\n%s", code, out)
	}
	if diffs, _ := hostDiffs(before, hostSnapshot(t, s.store)); len(diffs) > 0 {
		t.Errorf("--repair changed a log it cannot repair: %v", diffs)
	}
}

// slowAppender is a Python script: open the log argv[1] for appending
// and write a line into it every 0.3 s until argv[2] seconds have
// passed, through the one descriptor (a line so written is durable at
// its fsync or close, or within a second); print how many.
const slowAppender = `
import os, sys, time
end = time.time() + float(sys.argv[2])
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
n = 0
while time.time() < end:
    os.write(fd, b'{"role":"user","content":"one more"}\n')
    n += 1
    time.sleep(0.3)
os.close(fd)
print(n)
`

// TestFsckBesideAnOpenAppender: fsck beside a running server takes the
// bytes a log holds past the journal's records, when the journal has an
// intent for it, for appends not yet durable, as a follower does. It
// took them for damage ("bytes were added behind the store's back"),
// looking again for 150 ms only, while a line written through an open
// descriptor is durable within a second: a user who wrote a line to
// their own log every 0.3 s had it named damaged at nearly every fsck.
func TestFsckBesideAnOpenAppender(t *testing.T) {
	s := newFuseServer(t)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "s1", "s1", "", "hello")
	log := s.mnt("home/1001/agent/coder/session/s1/messages.jsonl")
	done := make(chan string, 1)
	go func() {
		out, err := runCmd(t, u, nil, "/usr/bin/python3", "-c", slowAppender, log, "6")
		done <- fmt.Sprint(out, err)
	}()
	time.Sleep(500 * time.Millisecond) // the first lines are in
	for i := 0; i < 8; i++ {
		if out, code := s.fsck(); code != 0 {
			t.Errorf("fsck beside a user appending to their log: exit %d\n%s", code, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("appender: %s", <-done)
	s.kill(s.cmd, syscall.SIGTERM)
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck once the server stopped: exit %d\n%s", code, out)
	}
}

// TestFsckBesideArchives: a session archived (or deleted) while fsck
// beside a running server goes through the store is not a problem: it
// was listed, then was gone when its turn came, and fsck named it as
// damaged ("no such file or directory", each value "unreadable:
// missing"), so a user moving their sessions made root's fsck fail. One
// that is gone, or is another directory, once looked at is passed over.
func TestFsckBesideArchives(t *testing.T) {
	s := newFuseServer(t)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "s1", "s1", "", "hello")
	sessions := s.mnt("home/1001/agent/coder/session")
	archive := s.mnt("home/1001/archived_sessions/coder")
	if out, err := bashAs(t, u, "mkdir -p "+archive+" && cd "+sessions+" && mkdir $(seq -f x%03g 1 300)"); err != nil {
		t.Fatalf("300 sessions: %v %s", err, out)
	}
	done := make(chan string, 1)
	go func() {
		// From the last: fsck, going from the first, meets sessions gone.
		out, err := bashAs(t, u, "cd "+sessions+" && for n in $(seq -f x%03g 300 -1 1); do mv $n "+archive+"/ || exit 1; done")
		done <- fmt.Sprint(out, err)
	}()
	for finished := false; !finished; {
		select {
		case out := <-done:
			if out != "<nil>" {
				t.Errorf("archiving: %s", out)
			}
			finished = true
		default:
			if out, code := s.fsck(); code != 0 {
				t.Errorf("fsck beside a user archiving their sessions: exit %d\n%s", code, lastLines(out, 6))
			}
		}
	}
}

// TestFsckBesideEmptyArchiveDirs: a directory the shape walk found and
// that was gone when it came to list it (a user's empty
// archived_sessions/<agent>/ removed meanwhile, which users may do) is
// not a problem, as an entry gone before its stat is not: fsck named it
// ("cannot be listed: no such file or directory") and exited 1.
func TestFsckBesideEmptyArchiveDirs(t *testing.T) {
	s := newFuseServer(t)
	u := &cred{uid: 1001, gid: 1001}
	s.sendAs(u, "s1", "s1", "", "hello")
	archived := s.mnt("home/1001/archived_sessions")
	done := make(chan string, 1)
	go func() {
		out, err := bashAs(t, u, "end=$((SECONDS+15)); while [ $SECONDS -lt $end ]; do mkdir -p "+archived+"/coder/ && rmdir "+archived+"/coder "+archived+" || exit 1; done")
		done <- fmt.Sprint(out, err)
	}()
	for finished := false; !finished; {
		select {
		case out := <-done:
			if out != "<nil>" {
				t.Errorf("making and removing archived_sessions/coder: %s", out)
			}
			finished = true
		default:
			if out, code := s.fsck(); code != 0 {
				t.Errorf("fsck beside a user making and removing their empty archive directories: exit %d\n%s", code, lastLines(out, 6))
				<-done
				return
			}
		}
	}
}

// TestFsckNamesDamagedJournal: the server's own journal files and its
// cluster fence (SPEC 6, 19) that cannot be read as such, a symlink or
// directory in a journal file's place, a fence that is not one, are
// problems of the store: fsck names each in one line (PATH: what) and
// exits 1, with and without --repair, and writes nothing. It exited 2,
// "could not run", with only a message on stderr, and checked nothing
// else of the store.
func TestFsckNamesDamagedJournal(t *testing.T) {
	s := newServer(t)
	s.mustRequest("coder", `{"op":"send","id":"c1","session":"s1","input":"hello"}`)
	s.kill(s.cmd, syscall.SIGTERM) // a clean stop: no journal file left
	state := filepath.Join(s.store, ".ctxfs")
	journal, fence := filepath.Join(state, "journal-0000000000000001"), filepath.Join(state, "fence")
	for _, c := range []struct {
		name, path, what string
		damage           func() error
	}{
		{"journal symlink", journal, "a symlink, not a regular file", func() error { return os.Symlink("/etc/passwd", journal) }},
		{"journal directory", journal, "a directory, not a regular file", func() error { return os.Mkdir(journal, 0o700) }},
		{"fence not one", fence, "not a fence file", func() error { return os.WriteFile(fence, []byte("garbage\n"), 0o600) }},
		{"fence directory", fence, "a directory, not a regular file", func() error { return os.Mkdir(fence, 0o700) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			testkit.Must(t, c.damage())
			defer os.RemoveAll(c.path)
			before := hostSnapshot(t, s.store)
			for _, args := range [][]string{nil, {"--repair"}} {
				out, errs, code := fsckEnv(t, nil, append([]string{"--store", s.store}, args...)...)
				line := fsckLine(out, c.path+": ", c.what)
				if code != 1 || line == "" || strings.Count(out, c.path+": ") != 1 {
					t.Errorf("fsck %v: exit %d, want 1 and one line %q\nstdout %q\nstderr %q", args, code, c.path+": "+c.what, out, errs)
				}
				if diffs, _ := hostDiffs(before, hostSnapshot(t, s.store)); len(diffs) > 0 {
					t.Errorf("fsck %v changed the store: %v", args, diffs)
				}
			}
		})
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck once put back: exit %d\n%s", code, out)
	}
}

// TestFsckOneLinePerProblem: what fsck says of a damaged file quotes its
// bytes, and a line of fsck's is one problem (SPEC 6) whatever they hold:
// a state file holding a newline and a line of its own printed that line
// as a second problem, and its escape sequences reached root's terminal
// as they were. Control characters are now shown escaped as Go quotes
// them (\n, \a, \x1b).
func TestFsckOneLinePerProblem(t *testing.T) {
	s := newServer(t)
	s.mustRequest("coder", `{"op":"send","id":"c1","session":"s1","input":"hello"}`)
	s.kill(s.cmd, syscall.SIGTERM)
	state := filepath.Join(s.sessionDir(0, "coder", "s1"), "state")
	testkit.Must(t, os.WriteFile(state, []byte("idle\x1b]52;c;aGk=\x07\n"+s.store+"/home/0/x: forged\n"), 0o600))
	before := hostSnapshot(t, s.store)
	out, errs, code := fsckEnv(t, nil, "--store", s.store)
	want := state + `: not a state: idle\x1b]52;c;aGk=\a\n` + s.store + "/home/0/x: forged\n"
	if code != 1 || out != want {
		t.Errorf("fsck of a state holding a line and an escape: exit %d, want 1\nstdout %q\nwant   %q\nstderr %q", code, out, want, errs)
	}
	if diffs, _ := hostDiffs(before, hostSnapshot(t, s.store)); len(diffs) > 0 {
		t.Errorf("fsck changed the store: %v", diffs)
	}
}

// TestFsckStoreModeOpen: a store directory a person opened up (0755: any
// user may read every session in it) is a problem fsck names, changing
// nothing; fsck --repair makes it 0700 as a mount would, and says so; then
// fsck is clean. A store of another owner is named and left to a person,
// --repair or not.
func TestFsckStoreModeOpen(t *testing.T) {
	s := newServer(t)
	s.mustRequest("coder", `{"op":"send","id":"c1","session":"s1","input":"hello"}`)
	s.kill(s.cmd, syscall.SIGTERM)
	testkit.Must(t, os.Chmod(s.store, 0o755))
	before := hostSnapshot(t, s.store)
	out, _, code := fsckEnv(t, nil, "--store", s.store)
	if code != 1 || fsckLine(out, s.store+": ", "mode 0755, not 0700") == "" {
		t.Errorf("fsck of a store of mode 0755: exit %d, want 1 and a line naming its mode:\n%s", code, out)
	}
	if st, err := os.Stat(s.store); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("fsck without --repair changed the store's mode: %v %v", st.Mode(), err)
	}
	if diffs, _ := hostDiffs(before, hostSnapshot(t, s.store)); len(diffs) > 0 {
		t.Errorf("fsck without --repair wrote the store: %v", diffs)
	}

	out, _, code = fsckEnv(t, nil, "--store", s.store, "--repair")
	if code != 0 || fsckLine(out, s.store+": ", "repaired: made the store directory the server's alone (0700)") == "" {
		t.Errorf("fsck --repair of a store of mode 0755: exit %d, want 0 and a repaired line:\n%s", code, out)
	}
	if st, err := os.Stat(s.store); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the store after fsck --repair: %v %v, want 0700", st.Mode(), err)
	}
	if out, _, code = fsckEnv(t, nil, "--store", s.store); code != 0 || out != "clean\n" {
		t.Errorf("fsck after the repair: exit %d\n%s", code, out)
	}

	testkit.Must(t, os.Chown(s.store, 1001, 1001))
	t.Cleanup(func() { os.Chown(s.store, 0, 0) })
	for _, args := range [][]string{{"--store", s.store}, {"--store", s.store, "--repair"}} {
		out, _, code = fsckEnv(t, nil, args...)
		if code != 1 || fsckLine(out, s.store+": ", "belongs to uid 1001") == "" {
			t.Errorf("fsck %v of a store uid 1001 owns: exit %d, want 1 and a line naming its owner:\n%s", args, code, out)
		}
	}
	if st, err := os.Stat(s.store); err != nil || st.Sys().(*syscall.Stat_t).Uid != 1001 {
		t.Errorf("fsck --repair changed the owner of a store uid 1001 owns: %v", err)
	}
}
