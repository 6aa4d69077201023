package fsck

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/storefs"
)

// Paths of the hand-built store below.
const (
	shHome    = "home/1000"
	shAgent   = shHome + "/agent/coder"
	shSess    = shAgent + "/session"
	shDefault = shSess + "/default"
	shIndex   = shSess + "/index"
	shArch    = shHome + "/archived_sessions/coder/old"
	shSpace   = "shared/team"
	shTeam    = shSpace + "/agent/bot/session/t1"
	shSpaceGr = 1234
)

// shapeStore is a store builder: every entry made with an exact mode and
// owner (the test runs as root).
type shapeStore struct {
	t    *testing.T
	root string
}

func (s shapeStore) path(rel string) string { return filepath.Join(s.root, rel) }

func (s shapeStore) own(rel string, mode os.FileMode, uid, gid int) {
	s.t.Helper()
	if err := os.Chmod(s.path(rel), mode); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Lchown(s.path(rel), uid, gid); err != nil {
		s.t.Fatal(err)
	}
}

func (s shapeStore) dir(rel string, mode os.FileMode, uid, gid int) {
	s.t.Helper()
	if err := os.MkdirAll(s.path(rel), 0o700); err != nil {
		s.t.Fatal(err)
	}
	s.own(rel, mode, uid, gid)
}

func (s shapeStore) file(rel string, mode os.FileMode, uid, gid int) {
	s.t.Helper()
	if err := os.WriteFile(s.path(rel), []byte("x\n"), 0o600); err != nil {
		s.t.Fatal(err)
	}
	s.own(rel, mode, uid, gid)
}

func (s shapeStore) symlink(target, rel string) {
	s.t.Helper()
	if err := os.Symlink(target, s.path(rel)); err != nil {
		s.t.Fatal(err)
	}
}

func (s shapeStore) fifo(rel string) {
	s.t.Helper()
	if err := syscall.Mkfifo(s.path(rel), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// replace removes what is at rel, to plant something else there.
func (s shapeStore) replace(rel string) {
	s.t.Helper()
	if err := os.RemoveAll(s.path(rel)); err != nil {
		s.t.Fatal(err)
	}
}

var shapeSessionFiles = []string{
	"messages.jsonl", "events.jsonl", "latest.md", "state", "cwd",
	"created_at", "updated_at", "meta.json",
}

// session makes a complete session directory as the store holds a
// home's (uid, 0700, 0600) or a space's (group gid, 0770, 0660): its
// history root's with the owner's mode bits and the group kept, its
// context/ the user's with the logical modes.
func (s shapeStore) session(rel string, uid, gid int, dmode, fmode os.FileMode) {
	s.dir(rel, dmode&0o700, 0, gid)
	for _, f := range shapeSessionFiles {
		s.file(rel+"/"+f, fmode&0o700, 0, gid)
	}
	s.dir(rel+"/.seal", 0o700, 0, gid)
	for _, f := range []string{"messages.jsonl", "events.jsonl", "identity"} {
		s.file(rel+"/.seal/"+f, 0o600, 0, gid)
	}
	s.file(rel+"/.state.spare", 0o600, 0, gid)
	s.dir(rel+"/context", dmode, uid, gid)
}

// newShapeStore builds a clean store: nothing in it should be reported.
func newShapeStore(t *testing.T) shapeStore {
	s := shapeStore{t, t.TempDir()}
	s.dir(".ctxfs", 0o700, 0, 0)
	s.file(".ctxfs/running", 0o600, 0, 0)
	s.file(".ctxfs.lock", 0o600, 0, 0)
	s.file("ctxfs.log", 0o644, 0, 0)
	s.dir("home", 0o755, 0, 0)
	s.dir("shared", 0o755, 0, 0)

	// A home, with an agent, a session and its index.
	s.dir(shHome, 0o700, 0, 1000)
	s.dir(shHome+"/agent", 0o700, 0, 1000)
	s.dir(shAgent, 0o700, 0, 1000)
	s.dir(shSess, 0o700, 0, 1000)
	s.session(shDefault, 1000, 1000, 0o700, 0o600)
	// context/ is the user's: a symlink out and a FIFO are fine there.
	s.symlink("/etc", shDefault+"/context/etc")
	s.fifo(shDefault + "/context/pipe")
	s.dir(shDefault+"/context/deep/er", 0o755, 0, 0)
	s.dir(shIndex, 0o700, 0, 1000)
	s.file(shIndex+"/list", 0o600, 0, 1000)
	s.file(shIndex+"/current", 0o600, 0, 1000)
	for _, d := range []string{"by-cwd", "by-hash", "by-uuid"} {
		s.dir(shIndex+"/"+d, 0o700, 0, 1000)
	}
	s.file(shIndex+"/by-cwd/cwd-0123456789abcdef", 0o600, 0, 1000)
	// root/ is the agent's chroot: anything goes below it.
	s.dir(shAgent+"/root", 0o700, 1000, 1000)
	s.dir(shAgent+"/root/usr/bin", 0o755, 0, 0)
	s.symlink("/bin/sh", shAgent+"/root/usr/bin/sh")
	s.symlink("../..", shAgent+"/root/up")
	s.fifo(shAgent + "/root/fifo")
	// The self_id index, as root keeps it.
	s.dir(shHome+"/.self_id", 0o700, 0, 0)
	s.file(shHome+"/.self_id/me", 0o600, 0, 0)
	// A model container, empty.
	s.dir(shHome+"/model/openai/gpt-4.d/session", 0o700, 0, 1000)
	s.own(shHome+"/model", 0o700, 0, 1000)
	s.own(shHome+"/model/openai", 0o700, 0, 1000)
	s.own(shHome+"/model/openai/gpt-4.d", 0o700, 0, 1000)
	// An archived session: modes as they were, context/ untouched.
	s.dir(shHome+"/archived_sessions/coder", 0o755, 0, 1000)
	s.own(shHome+"/archived_sessions", 0o700, 0, 1000)
	s.session(shArch, 1000, 1000, 0o755, 0o644)
	s.symlink("/", shArch+"/context/slash")

	// A shared space: root's directory, group 1234; below it root's
	// history in the space's group, 0700/0600, and context/ of its writer,
	// the space's group, 0770.
	s.dir(shSpace, 0o2770, 0, shSpaceGr)
	for _, d := range []string{"/agent", "/agent/bot", "/agent/bot/session"} {
		s.dir(shSpace+d, 0o700, 0, shSpaceGr)
	}
	s.session(shTeam, 1001, shSpaceGr, 0o770, 0o660)
	s.dir(shSpace+"/.self_id", 0o700, 0, 0)
	return s
}

type shapeReport struct{ rel, what string }

// runShape runs checkShape on the store, failing when it does not return
// promptly (it must never leave the store or block on a FIFO).
func runShape(t *testing.T, root string) []shapeReport {
	t.Helper()
	r, err := storefs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []shapeReport
	n := -1
	done := make(chan struct{})
	go func() {
		defer close(done)
		n = checkShape(r, func(rel, what string, _ bool) { got = append(got, shapeReport{rel, what}) })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("checkShape did not return")
	}
	if n != len(got) {
		t.Errorf("checkShape returned %d, reported %d", n, len(got))
	}
	return got
}

func TestShapeClean(t *testing.T) {
	s := newShapeStore(t)
	if got := runShape(t, s.root); len(got) != 0 {
		t.Errorf("clean store: %q", got)
	}
}

func TestShapeProblems(t *testing.T) {
	cases := []struct {
		name  string
		plant func(s shapeStore)
		rel   string
		what  string // a substring of the report
	}{
		{"symlink for a file", func(s shapeStore) {
			s.replace(shDefault + "/state")
			s.symlink("/etc/passwd", shDefault+"/state")
		}, shDefault + "/state", "a symlink, not a regular file"},
		{"symlink for a spare twin", func(s shapeStore) {
			s.replace(shDefault + "/.state.spare")
			s.symlink("state", shDefault+"/.state.spare")
		}, shDefault + "/.state.spare", "a symlink, not a regular file"},
		{"symlink for the agent dir", func(s shapeStore) {
			s.replace(shAgent)
			s.symlink("/tmp", shAgent)
		}, shAgent, "a symlink, not a directory"},
		{"symlink for a session dir", func(s shapeStore) {
			s.replace(shDefault)
			s.symlink("/", shDefault)
		}, shDefault, "a symlink, not a directory"},
		{"symlink for the index dir", func(s shapeStore) {
			s.replace(shIndex)
			s.symlink("default", shIndex)
		}, shIndex, "a symlink, not a directory"},
		{"symlink for a seal file", func(s shapeStore) {
			s.replace(shDefault + "/.seal/identity")
			s.symlink("/dev/null", shDefault+"/.seal/identity")
		}, shDefault + "/.seal/identity", "a symlink, not a regular file"},
		{"symlink for an index entry", func(s shapeStore) {
			s.replace(shIndex + "/by-cwd/cwd-0123456789abcdef")
			s.symlink("../../default", shIndex+"/by-cwd/cwd-0123456789abcdef")
		}, shIndex + "/by-cwd/cwd-0123456789abcdef", "a symlink, not a regular file"},
		{"FIFO for a log", func(s shapeStore) {
			s.replace(shDefault + "/events.jsonl")
			s.fifo(shDefault + "/events.jsonl")
		}, shDefault + "/events.jsonl", "a FIFO, not a regular file"},
		{"directory for a file", func(s shapeStore) {
			s.replace(shDefault + "/cwd")
			s.dir(shDefault+"/cwd", 0o700, 1000, 1000)
		}, shDefault + "/cwd", "a directory, not a regular file"},
		{"file for a directory", func(s shapeStore) {
			s.replace(shIndex + "/by-hash")
			s.file(shIndex+"/by-hash", 0o600, 1000, 1000)
		}, shIndex + "/by-hash", "a regular file, not a directory"},
		{"leftover session creation", func(s shapeStore) {
			s.dir(shSess+"/.new-x-123", 0o700, 1000, 1000)
			s.fifo(shSess + "/.new-x-123/events.jsonl")
		}, shSess + "/.new-x-123", "leftover temporary directory"},
		{"leftover deletion of an archived session", func(s shapeStore) {
			s.dir(shHome+"/archived_sessions/coder/.del-old-0011223344556677", 0o700, 0, 1000)
			s.fifo(shHome + "/archived_sessions/coder/.del-old-0011223344556677/events.jsonl")
		}, shHome + "/archived_sessions/coder/.del-old-0011223344556677", shapeLeftoverDel},
		{"leftover replace", func(s shapeStore) {
			s.file(shDefault+"/.state.tmp-0011223344556677", 0o600, 1000, 1000)
		}, shDefault + "/.state.tmp-0011223344556677", "leftover temporary file"},
		{"wrong owner in a home", func(s shapeStore) {
			s.own(shDefault+"/meta.json", 0o600, 1001, 1001)
		}, shDefault + "/meta.json", "owner 1001:1001, expected 0 (root: history is the server's)"},
		{"history of a home owned by its user", func(s shapeStore) {
			s.own(shDefault+"/messages.jsonl", 0o600, 1000, 1000)
		}, shDefault + "/messages.jsonl", "owner 1000:1000, expected 0 (root: history is the server's)"},
		{"wrong mode in a home", func(s shapeStore) {
			s.own(shDefault+"/latest.md", 0o644, 0, 1000)
		}, shDefault + "/latest.md", "mode 0644, expected 0600"},
		{"wrong mode of a home", func(s shapeStore) {
			s.own(shHome, 0o755, 0, 1000)
		}, shHome, "mode 0755, expected 0700"},
		{"wrong owner of a home", func(s shapeStore) {
			s.own(shHome, 0o700, 1000, 1000)
		}, shHome, "owner 1000:1000, expected 0"},
		{"wrong group in a space", func(s shapeStore) {
			s.own(shTeam+"/messages.jsonl", 0o600, 0, 1001)
		}, shTeam + "/messages.jsonl", "group 1001, expected 1234 (the space's group)"},
		{"wrong mode in a space", func(s shapeStore) {
			s.own(shTeam+"/cwd", 0o660, 0, shSpaceGr)
		}, shTeam + "/cwd", "mode 0660, expected 0600"},
		{"wrong dir mode in a space", func(s shapeStore) {
			s.own(shTeam+"/context", 0o700, 1001, shSpaceGr)
		}, shTeam + "/context", "mode 0700, expected 0770"},
		{"ctl in the store", func(s shapeStore) {
			s.file(shDefault+"/ctl", 0o600, 1000, 1000)
		}, shDefault + "/ctl", "control file"},
		{"unknown name in a session", func(s shapeStore) {
			s.file(shDefault+"/notes.txt", 0o600, 1000, 1000)
		}, shDefault + "/notes.txt", shapeNotHere},
		{"unknown dot name in a session", func(s shapeStore) {
			s.file(shDefault+"/.hidden", 0o600, 1000, 1000)
		}, shDefault + "/.hidden", shapeNotHere},
		{"unknown directory in a home, not entered", func(s shapeStore) {
			s.dir(shHome+"/memory", 0o700, 1000, 1000)
			s.fifo(shHome + "/memory/fifo")
		}, shHome + "/memory", shapeNotHere},
		{"unknown file in a seal", func(s shapeStore) {
			s.file(shDefault+"/.seal/other", 0o600, 1000, 1000)
		}, shDefault + "/.seal/other", shapeNotHere},
		{"unknown top-level entry", func(s shapeStore) {
			s.file("junk", 0o600, 0, 0)
		}, "junk", shapeNotHere},
		{"a device in .ctxfs", func(s shapeStore) {
			if err := syscall.Mknod(s.path(".ctxfs/null"), syscall.S_IFCHR|0o600, 0x103); err != nil {
				s.t.Fatal(err)
			}
		}, ".ctxfs/null", "a character device, not a regular file"},
		{"symlink in an archived session", func(s shapeStore) {
			s.replace(shArch + "/state")
			s.symlink("/etc/shadow", shArch+"/state")
		}, shArch + "/state", "a symlink, not a regular file"},
		{"wrong owner in an archived session", func(s shapeStore) {
			s.own(shArch+"/latest.md", 0o644, 1001, 1000)
		}, shArch + "/latest.md", "owner 1001:1000, expected 0"},
		{"wrong owner of .self_id", func(s shapeStore) {
			s.own(shHome+"/.self_id/me", 0o600, 1001, 0)
		}, shHome + "/.self_id/me", "owner 1001:0, expected 0 (root: history is the server's)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newShapeStore(t)
			c.plant(s)
			got := runShape(t, s.root)
			if len(got) != 1 || got[0].rel != c.rel || !strings.Contains(got[0].what, c.what) {
				t.Errorf("got %q, want one report %s: …%s…", got, c.rel, c.what)
			}
		})
	}
}

// TestShapeStaysInStore: a home that is a symlink to a directory outside
// the store is reported as a symlink and never entered (the decoy holds a
// FIFO that would block an open, and wrong owners that would be reported).
func TestShapeStaysInStore(t *testing.T) {
	s := newShapeStore(t)
	decoy := t.TempDir()
	if err := os.MkdirAll(filepath.Join(decoy, "agent/coder/session/x"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(decoy, "agent/coder/session/x/messages.jsonl"), 0o666); err != nil {
		t.Fatal(err)
	}
	s.replace(shHome)
	s.symlink(decoy, shHome)
	got := runShape(t, s.root)
	if len(got) != 1 || got[0].rel != shHome || got[0].what != "a symlink, not a directory" {
		t.Errorf("got %q, want only %s: a symlink, not a directory", got, shHome)
	}
}
