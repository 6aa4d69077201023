package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
	"github.com/ctxfs/ctxfs/session/versions"
)

// versionsOps tries each change of a session's versions/ through the
// mount and prints "<op> <errno name>" (or "<op> OK") a line. argv: the
// session directory in the mount, a content's name.
const versionsOps = `
import errno, os, sys
d, h = sys.argv[1], sys.argv[2]
v = d + "/versions"
idx, c = v + "/index.jsonl", v + "/sha256/" + h
other = v + "/sha256/" + "0" * 64
def op(name, call):
    try:
        r = call()
        if isinstance(r, int) and name.startswith("open"):
            os.close(r)
        print(name, "OK")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
op("open-index-wronly", lambda: os.open(idx, os.O_WRONLY))
op("open-index-append", lambda: os.open(idx, os.O_WRONLY | os.O_APPEND))
op("open-index-trunc", lambda: os.open(idx, os.O_RDONLY | os.O_TRUNC))
op("open-content-rdwr", lambda: os.open(c, os.O_RDWR))
op("truncate-index", lambda: os.truncate(idx, 0))
op("create-in-versions", lambda: os.open(v + "/new", os.O_WRONLY | os.O_CREAT, 0o600))
op("create-content", lambda: os.open(other, os.O_WRONLY | os.O_CREAT, 0o600))
op("unlink-index", lambda: os.unlink(idx))
op("unlink-content", lambda: os.unlink(c))
op("rename-content", lambda: os.rename(c, other))
op("rename-index-out", lambda: os.rename(idx, d + "/context/idx"))
op("chmod-index", lambda: os.chmod(idx, 0o666))
op("chmod-versions", lambda: os.chmod(v, 0o777))
op("utime-content", lambda: os.utime(c, (1, 1)))
op("mkdir-in-versions", lambda: os.mkdir(v + "/d"))
op("rmdir-contents", lambda: os.rmdir(v + "/sha256"))
op("symlink-in-versions", lambda: os.symlink("/etc/passwd", v + "/sha256/" + "1" * 64))
op("link-content", lambda: os.link(c, v + "/sha256/" + "2" * 64))
`

// versionedRel is the session of uid 1001 that versionedSession makes.
const versionedRel = "home/1001/agent/coder/session/v"

// versionedSession starts a server, makes uid 1001's session v, stops the
// server, keeps versions in the session's store with the package (as the
// engine does: the server is the store's only writer) and starts the
// server again.
func versionedSession(t *testing.T, keep func(*versions.Store)) *server {
	t.Helper()
	s := newFuseServer(t)
	s.sendAs(uid1001, "v", "c1", "", "hello")
	s.kill(s.cmd, syscall.SIGTERM)
	root, key := storeKey(t, s)
	st, err := versions.Open(root, key, versionedRel)
	testkit.Must(t, err)
	keep(st)
	s.start()
	eventually(t, cmdLimit, "both mounts up", func() bool {
		return mountsAt(s.mnt("home")) == 1 && mountsAt(s.mnt("shared")) == 1
	})
	return s
}

// storeKey opens the server's store and reads its seal key.
func storeKey(t *testing.T, s *server) (*storefs.Root, *sealedlog.Key) {
	t.Helper()
	root, err := storefs.Open(s.store)
	testkit.Must(t, err)
	t.Cleanup(func() { root.Close() })
	return root, layout.ReadSealKey(root, func(p, what string) { t.Fatalf("seal key %s: %s", p, what) })
}

func mustKeep(t *testing.T, st *versions.Store, run, call, p string, before []byte, action string) {
	t.Helper()
	if _, err := st.Keep(run, call, p, before, action); err != nil {
		t.Fatal(err)
	}
}

func sumHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// A session's versions/ through the mount: read by its owner with exact
// bytes and sizes, refused to everyone else, every change refused with
// the errno the other read-only files give, nothing written.
func TestVersionsReadOnlyThroughMount(t *testing.T) {
	rel, old := versionedRel, []byte("the file as it was\n")
	s := versionedSession(t, func(st *versions.Store) {
		mustKeep(t, st, "r1", "call_1", "/work/a.txt", nil, versions.Create)
		mustKeep(t, st, "r1", "call_2", "/work/a.txt", old, versions.Modify)
		mustKeep(t, st, "r2", "call_1", "/work/b.txt", old, versions.Delete)
	})
	mdir, sdir := s.mnt(rel), filepath.Join(s.store, rel)

	out, err := runCmd(t, uid1001, nil, "ls", mdir+"/versions", mdir+"/versions/sha256")
	testkit.Must(t, err)
	if want := mdir + "/versions:\nindex.jsonl\nsha256\n\n" + mdir + "/versions/sha256:\n" + sumHex(old) + "\n"; out != want {
		t.Errorf("ls:\n%s\nwant:\n%s", out, want)
	}
	for _, f := range []string{"versions/index.jsonl", "versions/sha256/" + sumHex(old)} {
		got, err := runCmd(t, uid1001, nil, "cat", mdir+"/"+f)
		testkit.Must(t, err)
		if want := fileBytes(t, filepath.Join(sdir, f)); got != want {
			t.Errorf("cat %s: %q, want the store's %q", f, got, want)
		}
		size, err := runCmd(t, uid1001, nil, "stat", "-c", "%s %u %A", mdir+"/"+f)
		testkit.Must(t, err)
		if want := fmt.Sprintf("%d 1001 -r--------\n", len(got)); size != want {
			t.Errorf("stat %s: %q, want %q", f, size, want)
		}
	}
	if lines := strings.Count(fileBytes(t, filepath.Join(sdir, "versions/index.jsonl")), "\n"); lines != 3 {
		t.Errorf("index lines %d, want 3", lines)
	}
	// ctx agent versions reads the index through the mount, as its owner.
	out, err = runCmd(t, uid1001, []string{"CTX_ROOT=" + s.root}, ctxBin, "agent", "versions", "coder", "--session", "v")
	if want := "1\tr1\tcall_1\tcreate\t/work/a.txt\t-\n2\tr1\tcall_2\tmodify\t/work/a.txt\t19\n3\tr2\tcall_1\tdelete\t/work/b.txt\t19\n"; err != nil || out != want {
		t.Errorf("ctx agent versions: %v\n%q\nwant\n%q", err, out, want)
	}
	if _, err := runCmd(t, &cred{uid: 1002, gid: 1002}, nil, "cat", mdir+"/versions/index.jsonl"); err == nil {
		t.Errorf("another uid read the versions")
	}

	// Each change, as the owner (the kernel refuses writers of a file
	// without write bits: EACCES, as for latest.md) and as root (the
	// engine: EPERM).
	wantOwner := map[string]string{
		"open-index-wronly": "EACCES", "open-index-append": "EACCES", "open-index-trunc": "EACCES",
		"open-content-rdwr": "EACCES", "truncate-index": "EACCES",
		"create-in-versions": "EPERM", "create-content": "EPERM", "unlink-index": "EPERM",
		"unlink-content": "EPERM", "rename-content": "EPERM", "rename-index-out": "EPERM",
		"chmod-index": "EPERM", "chmod-versions": "EPERM", "utime-content": "EPERM",
		"mkdir-in-versions": "EPERM", "rmdir-contents": "ENOTEMPTY", "symlink-in-versions": "EPERM",
		"link-content": "EPERM",
	}
	wantRoot := map[string]string{}
	for op, e := range wantOwner {
		wantRoot[op] = e
		if e == "EACCES" {
			wantRoot[op] = "EPERM" // root passes the kernel's check; the engine refuses
		}
	}
	before := hostSnapshot(t, sdir)
	for _, who := range []*cred{uid1001, nil} {
		out, err := runCmd(t, who, nil, "/usr/bin/python3", "-c", versionsOps, mdir, sumHex(old))
		testkit.Must(t, err)
		want := wantOwner
		if who == nil {
			want = wantRoot
		}
		checkOps(t, credName(who), out, want)
	}
	after := hostSnapshot(t, sdir)
	if diffs, _ := hostDiffs(before, after); len(diffs) > 0 {
		t.Errorf("refused changes wrote:\n%s", strings.Join(diffs, "\n"))
	}
	// The same refusals as latest.md's (the other read-only files).
	out, err = runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", `
import errno, os, sys
for flags in (os.O_WRONLY, os.O_WRONLY | os.O_APPEND, os.O_RDONLY | os.O_TRUNC):
    try:
        os.close(os.open(sys.argv[1], flags)); print("OK")
    except OSError as e:
        print(errno.errorcode[e.errno])
`, mdir+"/latest.md")
	testkit.Must(t, err)
	if out != "EACCES\nEACCES\nEACCES\n" {
		t.Errorf("latest.md's refusals changed: %q (versions/ gives what it gives)", out)
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck exit %d:\n%s", code, out)
	}
}

// checkOps compares the "<op> <errno>" lines of versionsOps with want.
func checkOps(t *testing.T, who, out string, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	var bad []string
	for op, e := range want {
		if got[op] != e {
			bad = append(bad, op+": "+got[op]+", want "+e)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("as %s:\n%s", who, strings.Join(bad, "\n"))
	}
}

// Versions tampered with in the store read EIO through the mount, and
// fsck names them.
func TestVersionsTamperedIsEIO(t *testing.T) {
	rel, a, b := versionedRel, []byte("first\n"), []byte("second\n")
	s := versionedSession(t, func(st *versions.Store) {
		mustKeep(t, st, "r1", "call_1", "/work/a.txt", a, versions.Modify)
		mustKeep(t, st, "r1", "call_2", "/work/b.txt", b, versions.Modify)
	})
	mdir, sdir := s.mnt(rel), filepath.Join(s.store, rel)
	content := "versions/sha256/" + sumHex(a)
	if got, err := runCmd(t, uid1001, nil, "cat", mdir+"/"+content); err != nil || got != string(a) {
		t.Fatalf("cat before the tamper: %q %v", got, err)
	}
	// Same size, other bytes: only the hash tells.
	testkit.Must(t, os.WriteFile(filepath.Join(sdir, content), []byte("FIRST\n"), 0o600))
	if out, err := runCmd(t, uid1001, nil, "cat", mdir+"/"+content); err == nil || !strings.Contains(out, "Input/output error") {
		t.Errorf("cat of a tampered content: %q %v, want EIO", out, err)
	}
	if got, err := runCmd(t, uid1001, nil, "cat", mdir+"/versions/sha256/"+sumHex(b)); err != nil || got != string(b) {
		t.Errorf("cat of an intact content: %q %v", got, err)
	}
	idx := filepath.Join(sdir, "versions/index.jsonl")
	testkit.Must(t, os.WriteFile(idx, []byte(strings.Replace(fileBytes(t, idx), "/work/b.txt", "/work/c.txt", 1)), 0o600))
	if out, err := runCmd(t, uid1001, nil, "cat", mdir+"/versions/index.jsonl"); err == nil || !strings.Contains(out, "Input/output error") {
		t.Errorf("cat of a tampered index: %q %v, want EIO", out, err)
	}
	if out, err := runCmd(t, uid1001, []string{"CTX_ROOT=" + s.root}, ctxBin, "agent", "versions", "coder", "--session", "v"); err == nil || !strings.Contains(out, "EIO") {
		t.Errorf("ctx agent versions of a tampered index: %v %q, want EIO", err, out)
	}
	out, code := s.fsck()
	if code == 0 || !fsckNames(out, filepath.Join(sdir, "versions/index.jsonl")) {
		t.Errorf("fsck exit %d does not name the index:\n%s", code, out)
	}
}

// A session with versions archived keeps them byte for byte, and they
// still verify there (fsck clean), bound to the session they were kept in.
func TestVersionsMoveWithArchive(t *testing.T) {
	rel, a := versionedRel, []byte("kept\n")
	s := versionedSession(t, func(st *versions.Store) {
		mustKeep(t, st, "r1", "call_1", "/work/a.txt", a, versions.Modify)
	})
	s.sendAs(uid1001, "w", "c2", "", "hello") // v is no longer current
	live := hostSnapshot(t, filepath.Join(s.store, rel, "versions"))
	frames, raw, err := s.requestAs(uid1001, "coder", `{"op":"archive","session":"v"}`)
	if err != nil || !hasFrame(frames, "archived") {
		t.Fatalf("archive: %v %s", err, raw)
	}
	arel := "home/1001/archived_sessions/coder/v"
	if diffs, _ := hostDiffs(live, hostSnapshot(t, filepath.Join(s.store, arel, "versions"))); len(diffs) > 0 {
		t.Errorf("archived versions differ:\n%s", strings.Join(diffs, "\n"))
	}
	if got, err := runCmd(t, uid1001, nil, "cat", s.mnt(arel)+"/versions/sha256/"+sumHex(a)); err != nil || got != string(a) {
		t.Errorf("cat of an archived version: %q %v", got, err)
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck exit %d:\n%s", code, out)
	}
	root, key := storeKey(t, s)
	if ps := versions.Verify(root, key, arel); ps != nil {
		t.Errorf("archived versions do not verify: %v", ps)
	}
}

// TestVersionsContentHashedOnce: each open of a content through the mount
// is verified, and was hashed whole each time (8 MiB: 8 ms of the
// server's CPU; 200 opens by uid 1001 took it 1.55 s, a loop of opens a
// core, unbounded): 20 opens, none of which read a byte, had the server
// read the content 20 times. A content never changes, so it is hashed
// once per file (its inode, size and times): now at most once. A content
// changed afterwards is still EIO at the next open.
func TestVersionsContentHashedOnce(t *testing.T) {
	const n = 20
	big := make([]byte, 8<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	s := versionedSession(t, func(st *versions.Store) {
		st.Limit = 1 << 30
		mustKeep(t, st, "r1", "call_1", "/work/big", big, versions.Modify)
	})
	content := "versions/sha256/" + sumHex(big)
	store, mounted := filepath.Join(s.store, versionedRel, content), s.mnt(versionedRel)+"/"+content
	// Kept less than filestamp.RacyWindow ago, a file is not remembered.
	time.Sleep(2 * time.Second)
	reads := readsOf(t, store, func() {
		script := fmt.Sprintf("import os, sys\nfor i in range(%d):\n    os.close(os.open(sys.argv[1], os.O_RDONLY))\n", n)
		if out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", script, mounted); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	})
	if reads > 1 {
		t.Errorf("%d opens through the mount read the content %d times, want at most once (hashed once)", n, reads)
	}
	f, err := os.OpenFile(store, os.O_WRONLY, 0)
	testkit.Must(t, err)
	_, err = f.WriteAt([]byte{big[0] + 1}, 0) // same size, another byte
	testkit.Must(t, err)
	testkit.Must(t, f.Close())
	if out, err := runCmd(t, uid1001, nil, "cat", mounted); err == nil || !strings.Contains(out, "Input/output error") {
		t.Errorf("cat of a content changed after it was verified: %.100q %v, want EIO", out, err)
	}
}

// TestVersionsIndexVerifiedOnce: each open of versions/index.jsonl
// through the mount is verified, and read, hashed and parsed the whole
// index, holding the session's lock, before the copy the open serves was
// read (37 ms of the server's CPU an open at 3.8 MiB: a uid's loop of
// opens kept a core busy and the session's Keeps waiting): 20 opens read
// the index 40 times. It is verified once while it and its seal are
// unchanged (their inode, size and times): 21 reads now. An index changed
// afterwards is still EIO at the next open.
func TestVersionsIndexVerifiedOnce(t *testing.T) {
	const n = 20
	s := versionedSession(t, func(st *versions.Store) {
		for i := 0; i < 100; i++ {
			mustKeep(t, st, "r1", fmt.Sprintf("call_%d", i), fmt.Sprintf("/work/f%d", i), nil, versions.Create)
		}
	})
	idx := "versions/index.jsonl"
	store, mounted := filepath.Join(s.store, versionedRel, idx), s.mnt(versionedRel)+"/"+idx
	// Kept less than filestamp.RacyWindow ago, a file is not remembered.
	time.Sleep(2 * time.Second)
	reads := readsOf(t, store, func() {
		script := fmt.Sprintf("import os, sys\nfor i in range(%d):\n    os.close(os.open(sys.argv[1], os.O_RDONLY))\n", n)
		if out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", script, mounted); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	})
	if reads > n+1 {
		t.Errorf("%d opens through the mount read the index %d times, want at most %d (verified once)", n, reads, n+1)
	}
	f, err := os.OpenFile(store, os.O_WRONLY, 0)
	testkit.Must(t, err)
	_, err = f.WriteAt([]byte("/work/F"), int64(strings.Index(fileBytes(t, store), "/work/f")))
	testkit.Must(t, err)
	testkit.Must(t, f.Close())
	if out, err := runCmd(t, uid1001, nil, "cat", mounted); err == nil || !strings.Contains(out, "Input/output error") {
		t.Errorf("cat of an index changed after it was verified: %.100q %v, want EIO", out, err)
	}
}
