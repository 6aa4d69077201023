package integration

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// writePieces is a Python script: open argv[1] for writing (truncated),
// write each further argument with one write(2), close; it prints what
// each call answered ("write 1 ok", "write 2 EINVAL", "close ok").
const writePieces = `
import errno, os, sys
def name(e): return errno.errorcode.get(e.errno, str(e.errno))
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
for i, piece in enumerate(sys.argv[2:], 1):
    try:
        os.write(fd, piece.encode())
        print("write", i, "ok")
    except OSError as e:
        print("write", i, name(e))
try:
    os.close(fd)
    print("close ok")
except OSError as e:
    print("close", name(e))
`

// valueWriteServer is a server whose root has the sessions a and b of
// coder; a holds self_id alpha. Everything has reached the store.
func valueWriteServer(t *testing.T) *server {
	s := newFuseServer(t)
	s.send("a", "a1", "hello a")
	s.send("b", "b1", "hello b")
	testkit.Must(t, os.WriteFile(s.mnt(sessRel("a")+"/meta.json"), []byte(`{"client":"ctx","scope":"private","self_id":"alpha"}`+"\n"), 0))
	settle() // the derived files and the index's list reach the store
	return s
}

// refusedUnchanged runs do, which must be refused, and fails the test
// unless the store (every byte, owner, mode and time) and the file as
// the mount serves it are as they were.
func refusedUnchanged(t *testing.T, s *server, what, file string, do func()) {
	t.Helper()
	storeBefore, mountBefore := hostSnapshot(t, s.store), s.readMnt(file)
	do()
	storeUnchanged(t, what, storeBefore, hostSnapshot(t, s.store))
	if got := s.readMnt(file); got != mountBefore {
		t.Errorf("%s: %s through the mount is %q, was %q", what, file, got, mountBefore)
	}
}

// TestValueRefusedAtWriteFromBash: a refused value written by a shell's
// `echo … > FILE` (one write(2) holding the whole value, then a close
// whose error bash ignores) fails its write, so bash says why and exits
// non-zero; the old value stays (issue 20, item 4).
func TestValueRefusedAtWriteFromBash(t *testing.T) {
	s := valueWriteServer(t)
	for _, c := range []struct{ what, file, value, want string }{
		{"a changed scope", sessRel("a") + "/meta.json", `{"client":"ctx","scope":"shared"}`, "Invalid argument"},
		{"a self_id another session holds", sessRel("b") + "/meta.json", `{"client":"ctx","scope":"private","self_id":"ALPHA"}`, "File exists"},
		{"a model that is not defined", sessRel("a") + "/meta.json", `{"client":"ctx","scope":"private","model":"no/such"}`, "Invalid argument"},
		{"not JSON", sessRel("a") + "/meta.json", `not json`, "Invalid argument"},
		{"two objects", sessRel("a") + "/meta.json", `{"client":"ctx","scope":"private"} {}`, "Invalid argument"},
		{"a state that is none", sessRel("a") + "/state", `bogus`, "Invalid argument"},
	} {
		refusedUnchanged(t, s, c.what, c.file, func() {
			out, err := bashAs(t, nil, "echo '"+c.value+"' > "+s.mnt(c.file))
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("bash: echo %s (%s) > %s: %v %q, want a failure saying %q", c.value, c.what, c.file, err, out, c.want)
			}
		})
	}
	// A good value from bash is taken, as before.
	bash(t, `echo '{"client":"ctx","scope":"private","name":"b2","model":"debug/echo"}' > `+s.mnt(sessRel("b")+"/meta.json"))
	if got := s.readMnt(sessRel("b") + "/meta.json"); got != `{"client":"ctx","scope":"private","name":"b2","model":"debug/echo"}`+"\n" {
		t.Errorf("meta.json after a good value from bash: %q", got)
	}
}

// TestValueInSeveralWrites: a value that arrives in several writes is
// judged when it is whole: pieces that end in a newline but are not yet a
// whole JSON value pass their writes; a bad value whose last piece has
// no newline fails the close; one whose last piece completes it with a
// newline fails that write. The old value stays on every refusal (issue
// 20, item 4).
func TestValueInSeveralWrites(t *testing.T) {
	s := valueWriteServer(t)
	meta := sessRel("b") + "/meta.json"
	pieces := func(what string, want string, parts ...string) {
		t.Helper()
		out, err := runCmd(t, nil, nil, "/usr/bin/python3", append([]string{"-c", writePieces, s.mnt(meta)}, parts...)...)
		if err != nil || out != want {
			t.Errorf("%s: %v\n%s\nwant\n%s", what, err, out, want)
		}
	}
	pieces("a good value in two writes", "write 1 ok\nwrite 2 ok\nclose ok\n",
		`{"client":"ctx",`, `"scope":"private","name":"two"}`+"\n")
	if got := s.readMnt(meta); got != `{"client":"ctx","scope":"private","name":"two"}`+"\n" {
		t.Errorf("meta.json after two writes: %q", got)
	}
	// json.dumps(indent=1) written a line at a time: each piece ends in a
	// newline before the value is whole.
	pretty := "{\n \"client\": \"ctx\",\n \"scope\": \"private\",\n \"name\": \"lines\"\n}\n"
	lines := strings.SplitAfter(pretty, "\n")
	pieces("a good value a line at a time", "write 1 ok\nwrite 2 ok\nwrite 3 ok\nwrite 4 ok\nwrite 5 ok\nclose ok\n",
		lines[:len(lines)-1]...)
	if got := s.readMnt(meta); got != pretty {
		t.Errorf("meta.json after a line at a time: %q", got)
	}
	refusedUnchanged(t, s, "a bad value in two writes, the last without a newline", meta, func() {
		pieces("a bad value in two writes", "write 1 ok\nwrite 2 ok\nclose EINVAL\n", `{"client":"ctx",`, `"scope":"shared"}`)
	})
	refusedUnchanged(t, s, "a bad value completed by its second write", meta, func() {
		// The close judges what the first write left, unfinished: EINVAL.
		pieces("a bad value completed by its second write", "write 1 ok\nwrite 2 EINVAL\nclose EINVAL\n", `{"client":"ctx",`, `"scope":"shared"}`+"\n")
	})
	refusedUnchanged(t, s, "a self_id taken, in two writes", meta, func() {
		pieces("a self_id taken, in two writes", "write 1 ok\nwrite 2 ok\nclose EEXIST\n", `{"client":"ctx","scope":"private",`, `"self_id":"alpha"}`)
	})
}

// TestMetaModelMustExist: meta.json's model names a model that is
// defined (debug/echo is built in) or is "" (automatic); any other is
// EINVAL, as docs/reference.md says (issue 20, item 4).
func TestMetaModelMustExist(t *testing.T) {
	s := valueWriteServer(t)
	testkit.Must(t, os.MkdirAll(filepath.Join(s.root, "model", "local", "mock.d"), 0o755))
	meta := s.mnt(sessRel("a") + "/meta.json")
	for _, model := range []string{"no/such", "local/none", "nosuch/mock"} {
		refusedUnchanged(t, s, "model "+model, sessRel("a")+"/meta.json", func() {
			testkit.WantErrno(t, "model "+model, os.WriteFile(meta, []byte(`{"client":"ctx","scope":"private","model":"`+model+`"}`), 0), syscall.EINVAL)
		})
	}
	for _, model := range []string{"debug/echo", "local/mock", ""} {
		v := `{"client":"ctx","scope":"private","model":"` + model + `"}` + "\n"
		testkit.Must(t, os.WriteFile(meta, []byte(v), 0))
		if got := s.readMnt(sessRel("a") + "/meta.json"); got != v {
			t.Errorf("model %q: meta.json is %q", model, got)
		}
	}
}

// TestMetaSelfIDLoweredStaysAValue: a meta.json whose self_id must be
// lowered is stored re-encoded, and a member name re-encodes longer
// than written ("<" is six bytes, \u003c): a value of under 1 MiB was
// stored as 6 MB, which no reader takes (EFBIG: every member's `cat`
// and `ls -l` of a shared session's meta.json) and fsck named as
// unreadable. Such a value is EFBIG at its write now, the old one kept.
func TestMetaSelfIDLoweredStaysAValue(t *testing.T) {
	const group = 1240
	s := newFuseServer(t)
	s.spaceAdd("team", group)
	a, b := member(1001, group), member(1002, group)
	s.sendAs(a, "t1", "t1", `,"scope":"shared","space":"team"`, "hello team")
	settle() // the derived files reach the store
	meta := "shared/team/agent/coder/session/t1/meta.json"
	value := `{"scope":"shared","self_id":"ABC","` + strings.Repeat("<", 1<<20-100) + `":1}` + "\n"
	src := filepath.Join(t.TempDir(), "meta.json") // over what one argument may be
	testkit.Must(t, os.WriteFile(src, []byte(value), 0o644))
	openToAll(t, src)
	refusedUnchanged(t, s, "a value that re-encodes past 1 MiB", meta, func() {
		out, err := runCmd(t, a, nil, "/usr/bin/python3", "-c", writeFileOnce, s.mnt(meta), src)
		if err != nil || !strings.HasPrefix(out, "write 1 EFBIG\n") {
			t.Errorf("a member's write of a meta.json that re-encodes past 1 MiB: %v %q, want EFBIG", err, out)
		}
	})
	if out, err := runCmd(t, b, nil, "/bin/cat", s.mnt(meta)); err != nil {
		t.Errorf("another member reads meta.json: %v %.200s", err, out)
	}
	s.kill(s.cmd, syscall.SIGTERM)
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: exit %d\n%s", code, out)
	}
}

// writeFileOnce is a Python script: write the bytes of the file argv[2]
// to argv[1] (truncated) with one write(2), close; it prints what each
// call answered, as writePieces does.
const writeFileOnce = `
import errno, os, sys
def name(e): return errno.errorcode.get(e.errno, str(e.errno))
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
try:
    os.write(fd, open(sys.argv[2], "rb").read())
    print("write 1 ok")
except OSError as e:
    print("write 1", name(e))
try:
    os.close(fd)
    print("close ok")
except OSError as e:
    print("close", name(e))
`

// TestCwdBounded: a session's cwd (its file, root's in the store, counted
// in no bound) is a path the kernel could chdir to, shorter than
// PATH_MAX: a longer one written by uid 1001 through the mount, or sent,
// is ENAMETOOLONG and changes nothing. Until 2026-12-05 it took any
// value up to 1 MiB, in each of a uid's 100,000 sessions.
func TestCwdBounded(t *testing.T) {
	s := limitedServer(t, "names=100", nil)
	s.sendAs(uid1001, "a", "q1", "", "hello")
	settle() // the derived files and the index's list reach the store
	const rel = "home/1001/agent/coder/session/a/cwd"
	cwd := s.mnt(rel)
	long := "/" + strings.Repeat("d", 100_000)
	refusedUnchanged(t, s, "a cwd of 100,001 bytes", rel, func() {
		out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", writePieces, cwd, long+"\n")
		testkit.Must(t, err)
		if !strings.Contains(out, "ENAMETOOLONG") {
			t.Errorf("a cwd of 100,001 bytes written through the mount: %q, want ENAMETOOLONG", out)
		}
		frames, raw, err := s.requestAs(uid1001, "coder", `{"op":"send","id":"long","session":"a","cwd":"`+long+`","input":"hi"}`)
		if err != nil || len(frames) != 1 || frames[0]["code"] != "ENAMETOOLONG" {
			t.Errorf("a send with a cwd of 100,001 bytes: %v %.200s, want ENAMETOOLONG", err, raw)
		}
	})
	ok := "/" + strings.Repeat("d", 4000)
	out, err := runCmd(t, uid1001, nil, "/usr/bin/python3", "-c", writePieces, cwd, ok+"\n")
	testkit.Must(t, err)
	if strings.TrimSpace(out) != "write 1 ok\nclose ok" {
		t.Errorf("a cwd of 4,001 bytes: %q", out)
	}
}
