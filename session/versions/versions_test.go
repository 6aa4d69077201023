package versions

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

var testKey = sealedlog.NewKey(bytes.Repeat([]byte{9}, 32))

const sessRel = "home/1000/agent/a/session/s"

// newSession makes a store holding one session directory with its
// identity, and returns the store's path and the session's versions.
func newSession(t *testing.T) (string, *Store) {
	t.Helper()
	dir := t.TempDir()
	testkit.Must(t, os.MkdirAll(filepath.Join(dir, sessRel, layout.SealDir), 0o700))
	id, err := layout.NewIdentity(sessRel)
	testkit.Must(t, err)
	testkit.Must(t, os.WriteFile(filepath.Join(dir, layout.SealRel(sessRel, layout.IdentityFile)), id, 0o600))
	root, err := storefs.Open(dir)
	testkit.Must(t, err)
	t.Cleanup(func() { root.Close() })
	s, err := Open(root, testKey, sessRel)
	testkit.Must(t, err)
	return dir, s
}

func keep(t *testing.T, s *Store, run, call, p string, before []byte, action string) int {
	t.Helper()
	v, err := s.Keep(run, call, p, before, action)
	testkit.Must(t, err)
	return v
}

func hexOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestKeepListContent(t *testing.T) {
	dir, s := newSession(t)
	if v := keep(t, s, "r1", "c1", "a.txt", nil, Create); v != 1 {
		t.Fatalf("first version %d", v)
	}
	keep(t, s, "r1", "c2", "a.txt", []byte("one\n"), Modify)
	keep(t, s, "r2", "c1", "b.txt", []byte("one\n"), Delete) // the same content: stored once
	keep(t, s, "r2", "c2", "empty", []byte{}, Modify)
	list, err := s.List()
	testkit.Must(t, err)
	if len(list) != 4 || list[1].V != 2 || list[2].Path != "b.txt" || list[2].Action != Delete || *list[3].Size != 0 {
		t.Fatalf("list %+v", list)
	}
	idx, _ := os.ReadFile(filepath.Join(dir, sessRel, Dir, IndexFile))
	want := `{"v":1,"run":"r1","call":"c1","path":"a.txt","action":"create"}` + "\n" +
		`{"v":2,"run":"r1","call":"c2","path":"a.txt","action":"modify","sha256":"` + hexOf([]byte("one\n")) + `","size":4}` + "\n"
	if !strings.HasPrefix(string(idx), want) {
		t.Fatalf("index:\n%s\nwant it to start with\n%s", idx, want)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, sessRel, Dir, ContentDir))
	if len(ents) != 2 {
		t.Fatalf("contents %v, want 2 (one per distinct content)", ents)
	}
	for v, want := range map[int]string{2: "one\n", 3: "one\n", 4: ""} {
		b, err := s.Content(v)
		testkit.Must(t, err)
		if string(b) != want {
			t.Errorf("version %d: %q, want %q", v, b, want)
		}
	}
	if b, err := s.Content(1); err != nil || b != nil {
		t.Errorf("a create's content: %q, %v; want absence", b, err)
	}
	_, err = s.Content(5)
	testkit.WantErrno(t, "content of no version", err, syscall.ENOENT)
	if p := Verify(s.root, testKey, sessRel); p != nil {
		t.Errorf("verify: %v", p)
	}
}

func TestKeepRefusesBadAction(t *testing.T) {
	_, s := newSession(t)
	_, err := s.Keep("r", "c", "p", []byte("x"), Create)
	testkit.WantErrno(t, "create with content", err, syscall.EINVAL)
	_, err = s.Keep("r", "c", "p", nil, Modify)
	testkit.WantErrno(t, "modify of absence", err, syscall.EINVAL)
}

// Every tamper is EIO at read, in Keep (nothing written), at the mount's
// check and in Verify. A damaged content refuses the versions that name
// it; a damaged index or seal refuses them all.
func TestTamperIsEIO(t *testing.T) {
	for name, tamper := range map[string]func(dir string){
		"content": func(dir string) {
			os.WriteFile(filepath.Join(dir, sessRel, Dir, ContentDir, hexOf([]byte("one\n"))), []byte("two\n"), 0o600)
		},
		"index byte": func(dir string) {
			p := filepath.Join(dir, sessRel, Dir, IndexFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"a.txt"`), []byte(`"b.txt"`), 1), 0o600)
		},
		"index cut": func(dir string) {
			p := filepath.Join(dir, sessRel, Dir, IndexFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o600)
		},
		"index removed": func(dir string) { os.Remove(filepath.Join(dir, sessRel, Dir, IndexFile)) },
		"seal removed":  func(dir string) { os.Remove(filepath.Join(dir, sessRel, Dir, SealFile)) },
		"index and seal rewritten without the key": func(dir string) {
			p := filepath.Join(dir, sessRel, Dir, IndexFile)
			b, _ := os.ReadFile(p)
			b = bytes.Replace(b, []byte(`"a.txt"`), []byte(`"b.txt"`), 1)
			os.WriteFile(p, b, 0o600)
			forged := &Store{key: sealedlog.NewKey(bytes.Repeat([]byte{1}, 32))}
			os.WriteFile(filepath.Join(dir, sessRel, Dir, SealFile), forged.seal(b), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, s := newSession(t)
			keep(t, s, "r1", "c1", "a.txt", []byte("one\n"), Modify)
			keep(t, s, "r1", "c2", "a.txt", []byte("three\n"), Modify)
			tamper(dir)
			before := testkit.Snapshot(t, dir, nil)
			_, err := s.Content(1)
			testkit.WantErrno(t, "content", err, syscall.EIO)
			// A damaged content is never overwritten: keeping its bytes
			// again is EIO too (a damaged index refuses every Keep).
			_, err = s.Keep("r2", "c1", "c.txt", []byte("one\n"), Modify)
			testkit.WantErrno(t, "keep", err, syscall.EIO)
			testkit.Same(t, "a refused keep", before, testkit.Snapshot(t, dir, nil))
			if name == "content" {
				testkit.WantErrno(t, "check", Check(s.root, testKey, sessRel, Dir+"/"+ContentDir+"/"+hexOf([]byte("one\n"))), syscall.EIO)
			} else {
				testkit.WantErrno(t, "check", Check(s.root, testKey, sessRel, Dir+"/"+IndexFile), syscall.EIO)
			}
			if p := Verify(s.root, testKey, sessRel); len(p) == 0 {
				t.Errorf("verify found nothing")
			}
		})
	}
}

// The index of one session moved into another does not verify there.
func TestIndexMovedFromAnotherSession(t *testing.T) {
	dir, s := newSession(t)
	keep(t, s, "r1", "c1", "a.txt", []byte("one\n"), Modify)
	id, _ := layout.NewIdentity(sessRel) // the session recreated at the same place
	os.WriteFile(filepath.Join(dir, layout.SealRel(sessRel, layout.IdentityFile)), id, 0o600)
	s2, err := Open(s.root, testKey, sessRel)
	testkit.Must(t, err)
	_, err = s2.List()
	testkit.WantErrno(t, "list", err, syscall.EIO, "seal does not verify")
}

func TestLimitIsEDQUOTAndWritesNothing(t *testing.T) {
	dir, s := newSession(t)
	s.Limit = 1000
	big := bytes.Repeat([]byte("x"), 1001)
	before := testkit.Snapshot(t, dir, nil)
	_, err := s.Keep("r", "c", "big", big, Modify)
	testkit.WantErrno(t, "first keep over the limit", err, syscall.EDQUOT)
	testkit.Same(t, "a keep over the limit", before, testkit.Snapshot(t, dir, nil))

	keep(t, s, "r", "c1", "a", bytes.Repeat([]byte("a"), 600), Modify)
	before = testkit.Snapshot(t, dir, nil)
	_, err = s.Keep("r", "c2", "b", bytes.Repeat([]byte("b"), 300), Modify)
	testkit.WantErrno(t, "keep over the limit", err, syscall.EDQUOT)
	testkit.Same(t, "a keep over the limit", before, testkit.Snapshot(t, dir, nil))
	// The same content again costs only its line.
	keep(t, s, "r", "c3", "a2", bytes.Repeat([]byte("a"), 600), Modify)
	if used, _ := s.Used(); used > s.Limit {
		t.Errorf("used %d over the limit %d", used, s.Limit)
	}
}

// A crash between a content and its line leaves a content no line names:
// no history, and the next Keep of those bytes uses it. A crash between
// the line and the seal leaves a line that is not history: it is not
// listed, and the next look cuts it.
func TestCrashLeftovers(t *testing.T) {
	dir, s := newSession(t)
	keep(t, s, "r1", "c1", "a", []byte("one\n"), Modify)
	orphan := []byte("orphan\n")
	testkit.Must(t, os.WriteFile(filepath.Join(dir, sessRel, Dir, ContentDir, hexOf(orphan)), orphan, 0o600))
	torn := filepath.Join(dir, sessRel, Dir, ContentDir, "."+hexOf([]byte("torn"))+".tmp-0123456789abcdef")
	testkit.Must(t, os.WriteFile(torn, []byte("to"), 0o600))
	p := filepath.Join(dir, sessRel, Dir, IndexFile)
	sealed, _ := os.ReadFile(p)
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"v":2,"run":"r1","call":"c2","path":"a","action":"create"}` + "\n" + `{"v":3,"ru`)
	f.Close()
	list, err := s.List()
	testkit.Must(t, err)
	if len(list) != 1 {
		t.Fatalf("list after a crash: %+v", list)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, sealed) {
		t.Fatalf("the unsealed lines were not cut:\n%s", got)
	}
	if v := keep(t, s, "r2", "c1", "b", orphan, Modify); v != 2 {
		t.Fatalf("version %d after the cut, want 2", v)
	}
	if _, err := os.Lstat(torn); !os.IsNotExist(err) {
		t.Errorf("a half-written content was left: %v", err)
	}
	if b, err := s.Content(2); err != nil || !bytes.Equal(b, orphan) {
		t.Fatalf("content %q %v", b, err)
	}
	if p := Verify(s.root, testKey, sessRel); p != nil {
		t.Errorf("verify: %v", p)
	}
}

// The first Keep interrupted before its seal: its line is cut, the
// history is empty.
func TestCrashBeforeFirstSeal(t *testing.T) {
	dir, s := newSession(t)
	keep(t, s, "r1", "c1", "a", nil, Create)
	os.Remove(filepath.Join(dir, sessRel, Dir, SealFile))
	list, err := s.List()
	testkit.Must(t, err)
	if len(list) != 0 {
		t.Fatalf("list %+v, want nothing", list)
	}
	if v := keep(t, s, "r1", "c2", "a", nil, Create); v != 1 {
		t.Fatalf("version %d, want 1", v)
	}
}

// TestKeepStatesNoContents: a Keep judges its bound from the index it has
// read and verified, not from the directory of contents: it listed
// versions/sha256/ and stated every content in it, a system call each
// (28,000 small contents: 200 ms a Keep, at each tool call that changes a
// file). Twenty Keeps listed the directory 40 times, twice each; now 20,
// once each: the sweep of a crash's temporaries, which states nothing.
func TestKeepStatesNoContents(t *testing.T) {
	dir, s := newSession(t)
	keep(t, s, "r", "c0", "a", []byte("0"), Modify) // makes sha256/
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	testkit.Must(t, err)
	defer unix.Close(fd)
	// Opens and closes too: inotify merges an event into the same one
	// unread before it, so one Keep's listing is told from the next's.
	_, err = unix.InotifyAddWatch(fd, filepath.Join(dir, sessRel, Dir, ContentDir), unix.IN_ACCESS|unix.IN_OPEN|unix.IN_CLOSE_NOWRITE)
	testkit.Must(t, err)
	for i := 1; i <= 20; i++ {
		keep(t, s, "r", fmt.Sprintf("c%d", i), "a", []byte(fmt.Sprint(i)), Modify)
	}
	listings, buf := 0, make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == syscall.EAGAIN {
			break
		}
		testkit.Must(t, err)
		for off := 0; off < n; {
			// struct inotify_event: wd, mask, cookie, len, then the name
			// (none for the directory itself, whose reads are listings).
			mask, nameLen := binary.NativeEndian.Uint32(buf[off+4:]), binary.NativeEndian.Uint32(buf[off+12:])
			if mask&unix.IN_ACCESS != 0 && nameLen == 0 {
				listings++
			}
			off += unix.SizeofInotifyEvent + int(nameLen)
		}
	}
	if listings > 20 {
		t.Errorf("20 Keeps listed versions/sha256/ %d times, want once each (the temporaries' sweep)", listings)
	}
	if used, _ := s.Used(); used > s.Limit {
		t.Errorf("used %d over the limit %d", used, s.Limit)
	}
}

// TestLocksLetGo: the lock of a session directory lives while a Store of
// it is held. Each Open (every restore request, every Keep) left an entry
// for its directory for good: a uid making, restoring and deleting
// sessions of new names grew the server without bound. The entries of
// 100 directories no Store holds are dropped once collected.
func TestLocksLetGo(t *testing.T) {
	dir := t.TempDir()
	const prefix = "home/1000/agent/a/session/gone-"
	root, err := storefs.Open(dir)
	testkit.Must(t, err)
	defer root.Close()
	held, err := Open(root, testKey, ".")
	testkit.Must(t, err)
	for i := 0; i < 100; i++ {
		rel := fmt.Sprintf("%s%d", prefix, i)
		testkit.Must(t, os.MkdirAll(filepath.Join(dir, rel), 0o700))
		_, err := Open(root, testKey, rel)
		testkit.Must(t, err)
	}
	left := func() int {
		n := 0
		locks.Range(func(k, _ any) bool {
			if strings.HasPrefix(k.(string), prefix) {
				n++
			}
			return true
		})
		return n
	}
	for start := time.Now(); left() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d locks of sessions no Store holds are kept", left())
		}
		runtime.GC()
	}
	// A Store held keeps its lock: another Open shares it.
	again, err := Open(root, testKey, ".")
	testkit.Must(t, err)
	runtime.GC()
	if again.lock != held.lock {
		t.Errorf("two Stores of one session have two locks")
	}
}

// fsck checks a session's versions beside the server's Keeps, without
// their lock: a Verify that read the index, then a seal a Keep wrote
// meanwhile, saw "index shorter than its seal says" (or, before the
// first seal, "index missing"). The window is a Keep's whole append and
// seal, so the verifiers are many threads on few cores, each one's reads
// stalled at times for longer than a Keep; fresh sessions, so that the
// first seal comes again and the index stays short.
func TestVerifyBesideKeeps(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	for round := 0; round < 5; round++ {
		_, s := newSession(t)
		if p := verifyBeside(s, func() {
			for i := 0; i < 20; i++ {
				keep(t, s, "r", "c", "a", nil, Create)
			}
		}); p != nil {
			t.Fatalf("round %d: verify beside a Keep: %v", round, p)
		}
	}
}

// verifyBeside runs Verify of s in 16 goroutines while work runs, and
// returns the first problem one reported.
func verifyBeside(s *Store, work func()) []Problem {
	problems := make(chan []Problem, 16)
	testkit.Beside(16, work, func() bool {
		if p := Verify(s.root, testKey, sessRel); p != nil {
			problems <- p
			return false
		}
		return true
	})
	select {
	case p := <-problems:
		return p
	default:
		return nil
	}
}
