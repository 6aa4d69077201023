package integration

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// plantTree is a tree of the store in which symlinks are planted: uid
// 1001's private home, or a shared space whose group uid 1001 is in.
type plantTree struct {
	name  string
	home  string // "home/1001" or "shared/team": the same path in the store and the mount
	who   *cred  // the owner who uses it
	extra string // request fields that select the tree
}

func (tr plantTree) sessions() string { return tr.home + "/agent/coder/session" }

// plantKind is one thing of the store replaced by a symlink.
type plantKind struct {
	name string
	rel  func(tr plantTree) string // its store path
	dir  bool                      // a directory (else a regular file)
}

func inSession(file string) func(plantTree) string {
	return func(tr plantTree) string { return tr.sessions() + "/default/" + file }
}

// plantKinds: files, spare twins, a seal, index entries, and directories
// at every depth from the home (or space) down to the session.
var plantKinds = []plantKind{
	{"file-state", inSession("state"), false},
	{"file-latest.md", inSession("latest.md"), false},
	{"file-messages.jsonl", inSession("messages.jsonl"), false},
	{"spare-state", inSession(".state.spare"), false},
	{"spare-latest.md", inSession(".latest.md.spare"), false},
	{"seal-messages.jsonl", inSession(".seal/messages.jsonl"), false},
	{"index-current", func(tr plantTree) string { return tr.sessions() + "/index/current" }, false},
	{"index-by-hash-entry", func(tr plantTree) string { return tr.sessions() + "/index/by-hash/h1" }, false},
	{"dir-seal", inSession(".seal"), true},
	{"dir-session", func(tr plantTree) string { return tr.sessions() + "/default" }, true},
	{"dir-index-by-hash", func(tr plantTree) string { return tr.sessions() + "/index/by-hash" }, true},
	{"dir-index", func(tr plantTree) string { return tr.sessions() + "/index" }, true},
	{"dir-session-container", func(tr plantTree) string { return tr.sessions() }, true},
	{"dir-agent", func(tr plantTree) string { return tr.home + "/agent/coder" }, true},
	{"dir-agents", func(tr plantTree) string { return tr.home + "/agent" }, true},
	{"dir-home", func(tr plantTree) string { return tr.home }, true},
}

// TestPlantedSymlinks: root plants a symlink in the store, where the
// server expects one of its own files or directories, pointing into a
// decoy tree outside the store (a root-only 0600 file with known content
// for files, a copy of the real directory for directories), while the
// server runs. Then the owner sends, asks status and resume, appends,
// writes a value, makes a session and reads through the mount; all of it
// again after a restart (cold caches, every file loaded anew); and root
// runs fsck. Nothing of the decoy may be read, written, created, chowned
// or chmodded (byte, owner, mode and atime snapshots), no reply or read
// shows the decoy's secret, an error frame's code is an errno name, fsck
// exits 1 naming each planted path, and the server still answers.
func TestPlantedSymlinks(t *testing.T) {
	requireFUSE(t)
	for _, k := range plantKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			plantedSymlink(t, k)
		})
	}
}

func plantedSymlink(t *testing.T, k plantKind) {
	requireFUSE(t)
	// Index values reach their store files when the journal is
	// checkpointed: soon, here, so that there is something to plant over.
	s := newServerWith(t, func(s *server) { s.env = append(s.env, "CTXFS_CHECKPOINT_EVERY=200ms") })
	openToAll(t, s.root)
	s.spaceAdd("team", 1234)
	trees := []plantTree{
		{name: "private", home: "home/1001", who: uid1001},
		{name: "shared", home: "shared/team", who: member(1001, 1234), extra: `,"scope":"shared","space":"team"`},
	}
	for _, tr := range trees {
		s.sendAs(tr.who, "default", "c1", tr.extra, "first")
		s.sendAs(tr.who, "default", "c2", tr.extra, "second") // the spare twins exist after a replace
		if out, err := bashAs(t, tr.who, "printf 'default\\n' > "+s.mnt(tr.sessions()+"/index/by-hash/h1")); err != nil {
			t.Fatalf("%s: by-hash/h1 through the mount: %v\n%s", tr.name, err, out)
		}
	}
	settle() // the index snapshot is on disk

	// The decoy: a root-only secret, a public directory, and for
	// directory kinds a copy of each real directory (owners and modes
	// kept), so that a server that followed the link would find what it
	// expects and carry on. A control tree of the same shape beside it
	// is never linked to. The real things are moved aside out of the
	// store, so that the planted links are all fsck can find wrong.
	// The moves aside are renames: on the store's filesystem. The decoy
	// and the control tree are on the test's own disk, whose atimes
	// record reads (a GlusterFS client's do not: the links' targets are
	// absolute paths, so where they lie changes nothing the server sees).
	base := besideStore(t, s.store)
	decoy, control, aside := filepath.Join(t.TempDir(), "decoy"), filepath.Join(t.TempDir(), "control"), filepath.Join(base, "aside")
	var rnd [8]byte
	rand.Read(rnd[:])
	secret := "DECOY-SECRET-" + hex.EncodeToString(rnd[:])
	for _, d := range []string{decoy, control} {
		testkit.Must(t, os.Mkdir(d, 0o755))
		testkit.Must(t, os.WriteFile(filepath.Join(d, "secret"), []byte(secret+"\n"), 0o600))
		testkit.Must(t, os.Mkdir(filepath.Join(d, "pub"), 0o755))
		testkit.Must(t, os.WriteFile(filepath.Join(d, "pub", "readme"), []byte("a public decoy file\n"), 0o644))
	}
	testkit.Must(t, os.Mkdir(aside, 0o700))
	planted := map[string]string{} // tree name -> host path of the link in the store
	targets := map[string]string{}
	for _, tr := range trees {
		rel := k.rel(tr)
		real := filepath.Join(s.store, rel)
		st, err := os.Lstat(real)
		if errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(rel, ".spare") && !storeExchanges(t, s.store) {
			t.Skipf("%s: the store's filesystem has no RENAME_EXCHANGE: its derived values keep no spare twin (storefs.Ways)", tr.name)
		}
		if err != nil {
			t.Fatalf("%s: nothing to plant over: %v", tr.name, err)
		}
		if st.IsDir() != k.dir || !k.dir && !st.Mode().IsRegular() {
			t.Fatalf("%s: %s is %v", tr.name, rel, st.Mode())
		}
		target := filepath.Join(decoy, "secret")
		if k.dir {
			target = filepath.Join(decoy, "copy-"+tr.name)
			bash(t, "cp -a "+real+" "+target)
			bash(t, "cp -a "+real+" "+filepath.Join(control, "copy-"+tr.name))
		}
		planted[tr.name], targets[tr.name] = real, target
	}
	primeAtimes(t, decoy)
	primeAtimes(t, control)
	before, controlBefore := hostSnapshot(t, decoy), hostSnapshot(t, control)
	for _, tr := range trees {
		real := planted[tr.name]
		testkit.Must(t, os.Rename(real, filepath.Join(aside, tr.name+"-"+filepath.Base(real))))
		testkit.Must(t, os.Symlink(targets[tr.name], real))
	}

	var results []string
	leak := func(what, out string) {
		if strings.Contains(out, secret) {
			t.Errorf("%s shows the decoy's root-only content: %q", what, out)
		}
	}
	// Everything twice: with the server running when the links appeared
	// (its caches warm), and after a restart (every file loaded anew).
	for _, phase := range []string{"live", "restarted"} {
		if phase == "restarted" {
			s.restart(syscall.SIGTERM)
		}
		for _, tr := range trees {
			exercisePlant(t, s, tr, phase, leak, &results)
		}
	}
	settle() // whatever the server writes in the background has been written

	out, code := s.fsck()
	leak("fsck", out)
	if code != 1 {
		t.Errorf("fsck: exit %d, want 1\n%s", code, out)
	}
	for _, tr := range trees {
		if !fsckNames(out, planted[tr.name]) {
			t.Errorf("%s: fsck does not name the planted %s\nsymlinks now in the store:\n  %s\nfsck output:\n%s",
				tr.name, planted[tr.name], strings.Join(storeLinks(s.store), "\n  "), out)
		}
	}
	decoyUntouched(t, k.name+" planted", before, hostSnapshot(t, decoy), controlBefore, hostSnapshot(t, control))
	if frames, err := s.request("coder", `{"op":"ping"}`); err != nil || len(frames) != 1 || frames[0]["type"] != "pong" {
		t.Errorf("the server no longer answers after the plant: %v %v\nserver log:\n%s", frames, err, lastLines(s.logText(), 30))
	}
	t.Logf("results with %s planted:\n  %s", k.name, strings.Join(results, "\n  "))
}

// exercisePlant runs, as the tree's owner, each operation that could
// reach a planted link: send to the session and to a new one, status,
// resume, an append, a value write and a mkdir through the mount, and
// reads through the mount. Any of them may fail; a failure's code must be
// an errno name, and no output may show the decoy's secret (leak checks).
func exercisePlant(t *testing.T, s *server, tr plantTree, phase string, leak func(what, out string), results *[]string) {
	t.Helper()
	sess := s.mnt(tr.sessions() + "/default")
	idx := s.mnt(tr.sessions() + "/index")
	for _, r := range []struct{ what, line string }{
		{"send", fmt.Sprintf(`{"op":"send","id":"p1-%s","session":"default"%s,"input":"after the plant"}`, phase, tr.extra)},
		{"send to a new session", fmt.Sprintf(`{"op":"send","id":"p2-%s","session":"new-%s"%s,"input":"a new session"}`, phase, phase, tr.extra)},
		{"status", fmt.Sprintf(`{"op":"status","session":"default"%s}`, tr.extra)},
		{"resume", fmt.Sprintf(`{"op":"resume","session":"default"%s}`, tr.extra)},
	} {
		what := phase + ": " + tr.name + ": " + r.what
		frames, raw, err := s.requestAs(tr.who, "coder", r.line)
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		checkErrorFrames(t, what, frames)
		leak(what, raw)
		res := "ok"
		if c := errorCode(frames); c != "" {
			res = c
		} else if len(frames) > 0 && frames[0]["type"] == "status" {
			res = fmt.Sprintf("ok (state %v)", frames[0]["state"])
		}
		*results = append(*results, what+": "+res)
	}
	for _, m := range []struct{ what, script string }{
		{"append", `printf '%s\n' '{"role":"user","content":"appended after the plant"}' >> ` + sess + "/messages.jsonl"},
		{"value write", "printf 'done\\n' > " + sess + "/state"},
		{"mkdir", "mkdir " + s.mnt(tr.sessions()+"/fresh-"+phase)},
		{"reads", fmt.Sprintf("for f in %[1]s/state %[1]s/latest.md %[1]s/messages.jsonl %[2]s/current %[2]s/list %[2]s/by-hash/h1; do cat $f; done; ls -la %[1]s %[2]s %[2]s/by-hash", sess, idx)},
	} {
		what := phase + ": " + tr.name + ": " + m.what
		out, err := bashAs(t, tr.who, m.script)
		leak(what, out)
		res := "ok"
		if err != nil {
			var msgs []string
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, ": ") && (strings.HasPrefix(l, "cat:") || strings.HasPrefix(l, "ls:") || strings.HasPrefix(l, "mkdir:") || strings.HasPrefix(l, "/bin/bash:")) {
					msgs = append(msgs, strings.ReplaceAll(l, s.root+"/", ""))
				}
			}
			res = fmt.Sprintf("%v: %s", err, strings.Join(msgs, "; "))
		}
		*results = append(*results, what+": "+res)
	}
}

// storeExchanges says whether the store's filesystem swaps derived
// values with renameat2(RENAME_EXCHANGE) (its spare twins stay), as the
// server recorded in .ctxfs/ways.
func storeExchanges(t testing.TB, store string) bool {
	b, err := os.ReadFile(filepath.Join(store, ".ctxfs", "ways"))
	testkit.Must(t, err)
	return !strings.Contains(string(b), "derived values: portable")
}
