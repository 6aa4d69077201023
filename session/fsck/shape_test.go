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

// planter puts something at rel in a clean store (TestShapeProblems).
type planter func(s shapeStore, rel string)

// symlinkTo plants, in place of what is at rel, a symlink to target.
func symlinkTo(target string) planter {
	return func(s shapeStore, rel string) {
		s.replace(rel)
		s.symlink(target, rel)
	}
}

// fifoFor plants a FIFO in place of what is at rel.
func fifoFor(s shapeStore, rel string) {
	s.replace(rel)
	s.fifo(rel)
}

// dirFor plants a directory in place of what is at rel.
func dirFor(mode os.FileMode, uid, gid int) planter {
	return func(s shapeStore, rel string) {
		s.replace(rel)
		s.dir(rel, mode, uid, gid)
	}
}

// fileAt plants a regular file at rel, in place of what is there.
func fileAt(mode os.FileMode, uid, gid int) planter {
	return func(s shapeStore, rel string) {
		s.replace(rel)
		s.file(rel, mode, uid, gid)
	}
}

// owned gives what is at rel another mode and owner.
func owned(mode os.FileMode, uid, gid int) planter {
	return func(s shapeStore, rel string) { s.own(rel, mode, uid, gid) }
}

// withFIFO plants a directory at rel with a FIFO in it: a walk that
// entered it would block (checkShape must not).
func withFIFO(mode os.FileMode, uid, gid int) planter {
	return func(s shapeStore, rel string) {
		s.dir(rel, mode, uid, gid)
		s.fifo(rel + "/events.jsonl")
	}
}

// TestShapeProblems: each thing planted in a clean store is the one
// report, at its place.
func TestShapeProblems(t *testing.T) {
	cases := []struct {
		name  string
		rel   string
		plant planter
		what  string // a substring of the report
	}{
		{"symlink for a file", shDefault + "/state", symlinkTo("/etc/passwd"), "a symlink, not a regular file"},
		{"symlink for a spare twin", shDefault + "/.state.spare", symlinkTo("state"), "a symlink, not a regular file"},
		{"symlink for the agent dir", shAgent, symlinkTo("/tmp"), "a symlink, not a directory"},
		{"symlink for a session dir", shDefault, symlinkTo("/"), "a symlink, not a directory"},
		{"symlink for the index dir", shIndex, symlinkTo("default"), "a symlink, not a directory"},
		{"symlink for a seal file", shDefault + "/.seal/identity", symlinkTo("/dev/null"), "a symlink, not a regular file"},
		{"symlink for an index entry", shIndex + "/by-cwd/cwd-0123456789abcdef", symlinkTo("../../default"), "a symlink, not a regular file"},
		{"FIFO for a log", shDefault + "/events.jsonl", fifoFor, "a FIFO, not a regular file"},
		{"directory for a file", shDefault + "/cwd", dirFor(0o700, 1000, 1000), "a directory, not a regular file"},
		{"file for a directory", shIndex + "/by-hash", fileAt(0o600, 1000, 1000), "a regular file, not a directory"},
		{"leftover session creation", shSess + "/.new-x-123", withFIFO(0o700, 1000, 1000), "leftover temporary directory"},
		{"leftover deletion of an archived session", shHome + "/archived_sessions/coder/.del-old-0011223344556677", withFIFO(0o700, 0, 1000), shapeLeftoverDel},
		{"leftover replace", shDefault + "/.state.tmp-0011223344556677", fileAt(0o600, 1000, 1000), "leftover temporary file"},
		{"wrong owner in a home", shDefault + "/meta.json", owned(0o600, 1001, 1001), "owner 1001:1001, expected 0 (root: history is the server's)"},
		{"history of a home owned by its user", shDefault + "/messages.jsonl", owned(0o600, 1000, 1000), "owner 1000:1000, expected 0 (root: history is the server's)"},
		{"wrong mode in a home", shDefault + "/latest.md", owned(0o644, 0, 1000), "mode 0644, expected 0600"},
		{"wrong mode of a home", shHome, owned(0o755, 0, 1000), "mode 0755, expected 0700"},
		{"wrong owner of a home", shHome, owned(0o700, 1000, 1000), "owner 1000:1000, expected 0"},
		{"wrong group in a space", shTeam + "/messages.jsonl", owned(0o600, 0, 1001), "group 1001, expected 1234 (the space's group)"},
		{"wrong mode in a space", shTeam + "/cwd", owned(0o660, 0, shSpaceGr), "mode 0660, expected 0600"},
		{"wrong dir mode in a space", shTeam + "/context", owned(0o700, 1001, shSpaceGr), "mode 0700, expected 0770"},
		{"ctl in the store", shDefault + "/ctl", fileAt(0o600, 1000, 1000), "control file"},
		{"unknown name in a session", shDefault + "/notes.txt", fileAt(0o600, 1000, 1000), shapeNotHere},
		{"unknown dot name in a session", shDefault + "/.hidden", fileAt(0o600, 1000, 1000), shapeNotHere},
		{"unknown directory in a home, not entered", shHome + "/memory", func(s shapeStore, rel string) {
			s.dir(rel, 0o700, 1000, 1000)
			s.fifo(rel + "/fifo")
		}, shapeNotHere},
		{"unknown file in a seal", shDefault + "/.seal/other", fileAt(0o600, 1000, 1000), shapeNotHere},
		{"unknown top-level entry", "junk", fileAt(0o600, 0, 0), shapeNotHere},
		{"a device in .ctxfs", ".ctxfs/null", func(s shapeStore, rel string) {
			if err := syscall.Mknod(s.path(rel), syscall.S_IFCHR|0o600, 0x103); err != nil {
				s.t.Fatal(err)
			}
		}, "a character device, not a regular file"},
		{"symlink in an archived session", shArch + "/state", symlinkTo("/etc/shadow"), "a symlink, not a regular file"},
		{"wrong owner in an archived session", shArch + "/latest.md", owned(0o644, 1001, 1000), "owner 1001:1000, expected 0"},
		{"wrong owner of .self_id", shHome + "/.self_id/me", owned(0o600, 1001, 0), "owner 1001:0, expected 0 (root: history is the server's)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newShapeStore(t)
			c.plant(s, c.rel)
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
	symlinkTo(decoy)(s, shHome)
	got := runShape(t, s.root)
	if len(got) != 1 || got[0].rel != shHome || got[0].what != "a symlink, not a directory" {
		t.Errorf("got %q, want only %s: a symlink, not a directory", got, shHome)
	}
}
