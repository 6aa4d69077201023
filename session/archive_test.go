package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/archive"
	"github.com/ctxfs/ctxfs/session/layout"
)

// age makes a session look untouched for d: its updated_at moves back.
func (env *testEnv) age(name string, d time.Duration) {
	p := filepath.Join(env.sessDir("home/0", "coder", name), abi.FileUpdatedAt)
	testkit.Must(env.t, os.WriteFile(p, []byte(strconv.FormatInt(time.Now().Add(-d).Unix(), 10)+"\n"), 0o600))
}

// TestGCIdleArchivesOldTempSessions: the server's clean-up archives
// temp-* sessions idle for the interval, and nothing else: not a fresh
// temp-*, not another name, not the current session.
func TestGCIdleArchivesOldTempSessions(t *testing.T) {
	env := newEnv(t)
	for _, n := range []string{"temp-old", "temp-fresh", "notes", "temp-current"} {
		env.send(root0, coder(), fmt.Sprintf(`{"op":"send","id":"c-%s","session":%q,"input":"x"}`, n, n))
	}
	env.age("temp-old", 2*time.Hour)
	env.age("notes", 2*time.Hour)
	env.age("temp-current", 2*time.Hour) // current: the last send
	got := env.e.GCIdle(time.Hour)
	if len(got) != 1 || filepath.Base(got[0]) != "temp-old" {
		t.Fatalf("GCIdle archived %v, want temp-old only", got)
	}
	if _, err := os.Stat(filepath.Join(env.store, "home/0", abi.ArchivedDir, "coder", "temp-old", abi.FileMessages)); err != nil {
		t.Errorf("temp-old is not in the archive: %v", err)
	}
	for _, n := range []string{"temp-fresh", "notes", "temp-current"} {
		if _, err := os.Stat(env.sessDir("home/0", "coder", n)); err != nil {
			t.Errorf("%s was taken: %v", n, err)
		}
	}
	if got := env.e.GCIdle(time.Hour); len(got) != 0 {
		t.Errorf("a second pass archived %v", got)
	}
}

// TestArchiveRefusesActive: a session with a run is EBUSY, unchanged.
func TestArchiveRefusesActive(t *testing.T) {
	env := newEnv(t)
	env.define("sleeper", map[string]string{"abi": "text", "program": sleeper})
	target := Target{Kind: abi.KindAgent, Owner: "sleeper"}
	env.begin(root0, target, `{"op":"send","id":"s1","session":"temp-busy","input":"x"}`)
	defer env.do(root0, target, `{"op":"cancel","id":"s1","session":"temp-busy"}`)
	env.send(root0, coder(), `{"op":"send","id":"c","session":"other","input":"x"}`) // another current
	ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "sleeper"}, Name: "temp-busy"}
	before := env.settledTree()
	testkit.WantErrno(t, "archive of an active session", env.e.Archive(ref, layout.PrivateOwner(0, 0), false), syscall.EBUSY)
	testkit.WantErrno(t, "check of an active session", env.e.checkArchive(ref), syscall.EBUSY)
	testkit.Same(t, "a refused archive", before, testkit.Snapshot(t, env.store, nil))
}

// TestArchiveRefusesUnsafeState: a session whose state is not a regular
// file, holds an unknown value or says active (no run: a store that
// says so is believed) is EBUSY and unchanged, by Archive and by gc's
// check alike (SPEC 12); a session without a state is an old one, taken.
func TestArchiveRefusesUnsafeState(t *testing.T) {
	env := newEnv(t)
	plants := map[string]func(p string) error{
		"temp-dir":     func(p string) error { return os.Mkdir(p, 0o700) },
		"temp-fifo":    func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"temp-unknown": func(p string) error { return os.WriteFile(p, []byte("bogus\n"), 0o600) },
		"temp-active":  func(p string) error { return os.WriteFile(p, []byte("active\n"), 0o600) },
		"temp-none":    func(string) error { return nil },
	}
	for n := range plants {
		env.send(root0, coder(), fmt.Sprintf(`{"op":"send","id":"c-%s","session":%q,"input":"x"}`, n, n))
	}
	env.send(root0, coder(), `{"op":"send","id":"c","session":"other","input":"x"}`) // another current
	env.settledTree()
	testkit.Must(t, env.e.Close()) // the store's files are what a cold engine reads
	for n, plant := range plants {
		p := filepath.Join(env.sessDir("home/0", "coder", n), abi.FileState)
		testkit.Must(t, os.Remove(p))
		testkit.Must(t, plant(p))
	}
	env.open()
	before := testkit.Snapshot(t, env.store, nil)
	for n := range plants {
		if n == "temp-none" {
			continue
		}
		ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"}, Name: n}
		testkit.WantErrno(t, "check of "+n, env.e.checkArchive(ref), syscall.EBUSY)
		testkit.WantErrno(t, "archive of "+n, env.e.Archive(ref, layout.PrivateOwner(0, 0), false), syscall.EBUSY)
	}
	testkit.Same(t, "refused archives", before, testkit.Snapshot(t, env.store, nil))
	ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "coder"}, Name: "temp-none"}
	testkit.Must(t, env.e.Archive(ref, layout.PrivateOwner(0, 0), false))
	if _, err := os.Stat(filepath.Join(env.store, "home/0", abi.ArchivedDir, "coder", "temp-none", abi.FileMessages)); err != nil {
		t.Errorf("a session without a state is not archived: %v", err)
	}
}

// TestGCIdleRechecksOnceTaken: a temp-* session found idle, then used by
// a send before the clean-up takes it, is kept (EBUSY, nothing moved):
// idleness is asked again once the session is out of the engine. And a
// session whose updated_at cannot be read is not taken for idle.
func TestGCIdleRechecksOnceTaken(t *testing.T) {
	env := newEnv(t)
	for _, n := range []string{"temp-raced", "temp-unread"} {
		env.send(root0, coder(), fmt.Sprintf(`{"op":"send","id":"c-%s","session":%q,"input":"x"}`, n, n))
	}
	env.send(root0, coder(), `{"op":"send","id":"c","session":"other","input":"x"}`) // another current
	env.age("temp-raced", 2*time.Hour)
	cutoff := time.Now().Add(-time.Hour).Unix()
	var found archive.Idle
	archive.EachIdle(env.e.root, cutoff, env.e.readUnix, func(s archive.Idle) {
		if s.Ref.Name == "temp-raced" {
			found = s
		}
	})
	if found.Rel == "" {
		t.Fatal("temp-raced was not found idle")
	}
	// Used meanwhile, in a later second than its last send: updated_at
	// (seconds) is written when its value changes, and age wrote the
	// store's file behind the engine.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	env.send(root0, coder(), `{"op":"send","id":"c2","session":"temp-raced","input":"y"}`)
	env.send(root0, coder(), `{"op":"send","id":"c3","session":"other","input":"x"}`)
	before := env.settledTree()
	testkit.WantErrno(t, "archive of a session used since it was found idle", env.e.archiveIdle(found, cutoff), syscall.EBUSY)
	testkit.Same(t, "a refused clean-up", before, testkit.Snapshot(t, env.store, nil))
	testkit.Must(t, os.WriteFile(filepath.Join(env.sessDir("home/0", "coder", "temp-unread"), abi.FileUpdatedAt), []byte("not a time\n"), 0o600))
	if got := env.e.GCIdle(time.Hour); len(got) != 0 {
		t.Errorf("GCIdle archived %v: neither is idle", got)
	}
}
