package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
)

// refusal runs op, wants errno, and checks byte for byte that the store
// did not change (a release that records something arrives after the
// close: wait a little before looking).
func refusal(t *testing.T, s *server, what string, want syscall.Errno, op func() error) {
	t.Helper()
	before := storeSnapshot(t, s)
	err := op()
	testkit.WantErrno(t, what, err, want)
	time.Sleep(30 * time.Millisecond)
	testkit.Same(t, what, before, storeSnapshot(t, s))
}

// refusalRecorded is refusal for lines refused through the mount: nothing
// of them is written, and the loss is recorded as exactly one error event
// with the errno (SPEC 6: the loss is never silent). Only events.jsonl, its
// seal, updated_at and the order of index/list may change.
func refusalRecorded(t *testing.T, s *server, what string, want syscall.Errno, op func() error) {
	t.Helper()
	recorded := func(rel string) bool {
		base := filepath.Base(rel)
		// The index's list is replaced through a temporary twin
		// (.list.tmp-<hex>), which a snapshot may meet mid-replace.
		index := filepath.Join(coderRel, "session", "index")
		return base == "events.jsonl" || base == "updated_at" || base == ".updated_at.spare" || rel == filepath.Join(index, "list") ||
			filepath.Dir(rel) == index && strings.HasPrefix(base, ".list.tmp-")
	}
	skip := func(rel string) bool {
		return rel == ".ctxfs" || rel == ".ctxfs.lock" || rel == "ctxfs.log" || recorded(rel)
	}
	before := testkit.Snapshot(t, s.store, skip)
	events := filepath.Join(s.sessionDir(0, "coder", "a"), "events.jsonl")
	evBefore := fileBytes(t, events)
	err := op()
	testkit.WantErrno(t, what, err, want)
	time.Sleep(30 * time.Millisecond)
	testkit.Same(t, what, before, testkit.Snapshot(t, s.store, skip))
	added := strings.TrimPrefix(fileBytes(t, events), evBefore)
	if strings.Count(added, "\n") != 1 || !strings.Contains(added, `"type":"error"`) || !strings.Contains(added, `"code":"`+abi.ErrnoName(want)+`"`) {
		t.Fatalf("%s: events.jsonl gained %q, want one error event with code %s", what, added, abi.ErrnoName(want))
	}
}

// settle waits until the index snapshot the server writes at most once a
// second is on disk, so that refusals can be checked byte for byte.
func settle() { time.Sleep(1200 * time.Millisecond) }

// TestErrnosThroughMount: every errno of SPEC sections 5 and 6 through the
// real mount, each refusal with a byte-for-byte check that nothing changed.
func TestErrnosThroughMount(t *testing.T) {
	s := newFuseServer(t)
	s.send("a", "a1", "hello a")
	s.send("b", "b1", "hello b")
	testkit.Must(t, os.WriteFile(s.mnt(sessRel("a")+"/meta.json"), []byte(`{"client":"ctx","scope":"private","self_id":"alpha"}`), 0))
	settle()
	dir := s.mnt(sessRel("a"))
	log := dir + "/messages.jsonl"
	ev := dir + "/events.jsonl"
	idx := s.mnt(coderRel + "/session/index")

	// Logs: O_APPEND only, never truncated, unlinked or renamed.
	for _, fl := range []int{os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND | os.O_TRUNC} {
		refusal(t, s, fmt.Sprintf("open log flags %#o", fl), syscall.EPERM, func() error {
			f, err := os.OpenFile(log, fl, 0)
			if err == nil {
				f.Close()
			}
			return err
		})
	}
	refusal(t, s, "truncate log", syscall.EPERM, func() error { return os.Truncate(ev, 0) })
	refusal(t, s, "truncate log longer", syscall.EPERM, func() error { return os.Truncate(ev, 1<<20) })
	refusal(t, s, "ftruncate log", syscall.EPERM, func() error {
		f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
		testkit.Must(t, err)
		defer f.Close()
		return f.Truncate(0)
	})
	refusal(t, s, "> on a log", syscall.EPERM, func() error {
		out, err := bashAs(t, nil, "echo '{}' > "+log)
		if err != nil && strings.Contains(out, "Operation not permitted") {
			return syscall.EPERM
		}
		return fmt.Errorf("bash: %v %q", err, out)
	})
	for _, f := range []string{"messages.jsonl", "events.jsonl", "state", "cwd", "meta.json", "latest.md", "created_at", "updated_at", "ctl"} {
		refusal(t, s, "unlink "+f, syscall.EPERM, func() error { return os.Remove(dir + "/" + f) })
		refusal(t, s, "rename "+f, syscall.EPERM, func() error { return os.Rename(dir+"/"+f, dir+"/"+f+".old") })
		refusal(t, s, "rename "+f+" into context/", syscall.EPERM, func() error { return os.Rename(dir+"/"+f, dir+"/context/x") })
	}
	refusal(t, s, "rename session", syscall.EPERM, func() error { return os.Rename(dir, s.mnt(sessRel("a2"))) })
	refusal(t, s, "rename session over another", syscall.EPERM, func() error { return syscall.Rename(dir, s.mnt(sessRel("b"))) })
	refusal(t, s, "rename agent", syscall.EPERM, func() error { return os.Rename(s.mnt(coderRel), s.mnt("home/0/agent/other")) })
	refusal(t, s, "rename index/list", syscall.EPERM, func() error { return os.Rename(idx+"/list", idx+"/list2") })
	refusal(t, s, "rename index/current", syscall.EPERM, func() error { return os.Rename(idx+"/current", idx+"/by-hash/k") })
	refusal(t, s, "unlink index/list", syscall.EPERM, func() error { return os.Remove(idx + "/list") })
	refusal(t, s, "unlink index/current", syscall.EPERM, func() error { return os.Remove(idx + "/current") })
	refusal(t, s, "rmdir index/by-hash", syscall.EPERM, func() error { return syscall.Rmdir(idx + "/by-hash") })
	refusal(t, s, "rmdir context/", syscall.EPERM, func() error { return syscall.Rmdir(dir + "/context") })
	refusal(t, s, "rmdir a session", syscall.ENOTEMPTY, func() error { return syscall.Rmdir(dir) })
	refusal(t, s, "rmdir session/", syscall.ENOTEMPTY, func() error { return syscall.Rmdir(s.mnt(coderRel + "/session")) })
	refusal(t, s, "rmdir home", syscall.ENOTEMPTY, func() error { return syscall.Rmdir(s.mnt("home/0")) })

	// Invalid lines: refused whole, at the write.
	bad := map[string]string{
		"not JSON":                "not json\n",
		"not an object":           "[1,2]\n",
		"a string":                "\"s\"\n",
		"two objects on one line": "{} {}\n",
		"bad UTF-8":               "{\"a\":\"\xff\xfe\"}\n",
		"an empty line":           "\n",
		"valid then invalid":      `{"role":"user","content":"ok"}` + "\nnope\n",
		"over 1 MiB":              `{"role":"user","content":"` + strings.Repeat("x", 1<<20) + "\"}\n",
		"over 1 MiB, no newline":  `{"role":"user","content":"` + strings.Repeat("y", 1<<20+10),
	}
	for what, line := range bad {
		refusalRecorded(t, s, "append "+what, syscall.EINVAL, func() error { return appendMnt(log, line) })
	}
	refusalRecorded(t, s, "append invalid from bash", syscall.EINVAL, func() error {
		out, err := bashAs(t, nil, "echo 'nope' >> "+log)
		if err != nil && strings.Contains(out, "Invalid argument") {
			return syscall.EINVAL
		}
		return fmt.Errorf("bash: %v %q", err, out)
	})

	// Single values: invalid values leave the old one.
	for _, v := range []string{"bogus\n", "idle\nidle\n", "IDLE", ""} {
		if v == "" {
			continue
		}
		refusal(t, s, fmt.Sprintf("state %q", v), syscall.EINVAL, func() error { return os.WriteFile(dir+"/state", []byte(v), 0) })
	}
	refusal(t, s, "state from bash", syscall.EINVAL, func() error {
		out, err := bashAs(t, nil, "echo nope > "+dir+"/state")
		if err != nil && strings.Contains(out, "Invalid argument") {
			return syscall.EINVAL
		}
		return fmt.Errorf("bash: %v %q", err, out)
	})
	for _, v := range []string{"relative/dir", "/a/../b", "/..", "..", "/a/b/.."} {
		refusal(t, s, "cwd "+v, syscall.EINVAL, func() error { return os.WriteFile(dir+"/cwd", []byte(v+"\n"), 0) })
	}
	for what, v := range map[string]string{
		"invalid JSON":   `{"client":`,
		"not an object":  `["client"]`,
		"duplicate keys": `{"client":"ctx","scope":"private","client":"x"}`,
		"changed scope":  `{"client":"ctx","scope":"shared"}`,
		"no scope":       `{"client":"ctx"}`,
		"bad model":      `{"client":"ctx","scope":"private","model":"no-slash"}`,
		"model not text": `{"client":"ctx","scope":"private","model":7}`,
		"bad self_id":    `{"client":"ctx","scope":"private","self_id":"has space"}`,
	} {
		refusal(t, s, "meta.json "+what, syscall.EINVAL, func() error { return os.WriteFile(dir+"/meta.json", []byte(v), 0) })
	}
	refusal(t, s, "self_id taken by another session", syscall.EEXIST, func() error {
		return os.WriteFile(s.mnt(sessRel("b")+"/meta.json"), []byte(`{"client":"ctx","scope":"private","self_id":"ALPHA"}`), 0)
	})
	if got := s.readMnt(sessRel("a") + "/state"); got != "done\n" {
		t.Errorf("state after refusals = %q", got)
	}

	// Names outside the ABI.
	for _, p := range []string{"home/0/history", "home/0/memory", "home/0/context", "home/0/swap", "home/0/task", coderRel + "/history", coderRel + "/session/index/other", sessRel("a") + "/notes"} {
		refusal(t, s, "mkdir "+p, syscall.EPERM, func() error { return os.Mkdir(s.mnt(p), 0o700) })
	}
	for _, p := range []string{"home/0/history", "home/0/memory", sessRel("a") + "/notes.txt", coderRel + "/notes.txt", coderRel + "/session/notes.txt", coderRel + "/session/index/notes"} {
		refusal(t, s, "create "+p, syscall.EPERM, func() error {
			f, err := os.OpenFile(s.mnt(p), os.O_CREATE|os.O_WRONLY, 0o600)
			if err == nil {
				f.Close()
			}
			return err
		})
	}
	refusal(t, s, "symlink in a session", syscall.EPERM, func() error { return os.Symlink("/etc/passwd", dir+"/notes") })
	refusal(t, s, "mkdir a bad session name", syscall.EINVAL, func() error { return os.Mkdir(s.mnt(sessRel("bad name")), 0o700) })
	refusal(t, s, "mkdir session index", syscall.EEXIST, func() error { return os.Mkdir(s.mnt(sessRel("index")), 0o700) })

	// Index: current names an existing session; list and by-cwd read only.
	refusal(t, s, "current names a missing session", syscall.ENOENT, func() error { return os.WriteFile(idx+"/current", []byte("nosuch\n"), 0) })
	refusal(t, s, "current bad name", syscall.EINVAL, func() error { return os.WriteFile(idx+"/current", []byte("bad name\n"), 0) })
	refusal(t, s, "write list", syscall.EPERM, func() error {
		f, err := os.OpenFile(idx+"/list", os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		return err
	})
	refusal(t, s, "truncate list", syscall.EPERM, func() error { return os.Truncate(idx+"/list", 0) })
	cwdKeys, err := os.ReadDir(idx + "/by-cwd")
	testkit.Must(t, err)
	if len(cwdKeys) != 1 {
		t.Fatalf("by-cwd holds %d entries, want 1", len(cwdKeys))
	}
	byCwd := idx + "/by-cwd/" + cwdKeys[0].Name()
	refusal(t, s, "write a by-cwd entry", syscall.EPERM, func() error {
		f, err := os.OpenFile(byCwd, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		return err
	})
	refusal(t, s, "unlink a by-cwd entry", syscall.EPERM, func() error { return os.Remove(byCwd) })
	refusal(t, s, "create a by-cwd entry", syscall.EPERM, func() error {
		return os.WriteFile(idx+"/by-cwd/cwd-0123456789abcdef", []byte("a\n"), 0o600)
	})
	refusal(t, s, "by-hash names a missing session", syscall.ENOENT, func() error { return os.WriteFile(idx+"/by-hash/h1", []byte("nosuch\n"), 0o600) })
	refusal(t, s, "by-uuid bad key", syscall.EINVAL, func() error { return os.WriteFile(idx+"/by-uuid/NOT-A-UUID", []byte("a\n"), 0o600) })
	refusal(t, s, "unlink a missing by-hash entry", syscall.ENOENT, func() error { return os.Remove(idx + "/by-hash/none") })
	// The name the refused create made goes once the creator closed it
	// (the invalidation is sent after the close returns).
	eventually(t, afterClose, "a refused by-hash entry disappears", func() bool {
		_, err := os.Stat(idx + "/by-hash/h1")
		return errors.Is(err, syscall.ENOENT)
	})

	// A partial line: held until its newline, discarded and recorded at
	// close.
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	testkit.Must(t, err)
	before := storeSnapshot(t, s)
	for _, part := range []string{`{"role":"user",`, `"content":"in`, ` pieces"`} {
		_, err := f.WriteString(part)
		testkit.Must(t, err)
	}
	time.Sleep(30 * time.Millisecond)
	testkit.Same(t, "a line without its newline yet", before, storeSnapshot(t, s))
	_, err = f.WriteString("}\n")
	testkit.Must(t, err)
	if !strings.HasSuffix(fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "a"), "messages.jsonl")), withUid(`{"role":"user","content":"in pieces"}`, 0)+"\n") {
		t.Errorf("a line in four writes was not committed at its newline")
	}
	_, err = f.WriteString(`{"role":"user","content":"never finished"`)
	testkit.Must(t, err)
	msgsBefore := fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "a"), "messages.jsonl"))
	testkit.WantErrno(t, "close with a partial line", f.Close(), syscall.EINVAL)
	var rec frame
	eventually(t, afterClose, "an error event for the discarded partial line", func() bool {
		rec = lastEvent(t, s, "a", "error")
		return rec != nil && rec["code"] == "EINVAL" && strings.HasPrefix(fmt.Sprint(rec["message"]), "partial line")
	})
	if rec["file"] != "messages.jsonl" || rec["bytes"] != float64(len(`{"role":"user","content":"never finished"`)) || rec["pid"] != float64(os.Getpid()) {
		t.Errorf("discard record %v, want file messages.jsonl, bytes %d, pid %d", rec, len(`{"role":"user","content":"never finished"`), os.Getpid())
	}
	if got := fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "a"), "messages.jsonl")); got != msgsBefore {
		t.Errorf("the discarded partial line reached the log")
	}
	// From a shell: printf exits 0 (shells ignore close errors), the
	// record names the shell's pid.
	out := bash(t, `echo $$; printf '{"a":1' >> `+ev)
	eventually(t, afterClose, "the shell's partial line recorded", func() bool {
		rec = lastEvent(t, s, "a", "error")
		return rec != nil && fmt.Sprint(rec["pid"]) == strings.TrimSpace(out)
	})
	if rec["file"] != "events.jsonl" || rec["bytes"] != float64(6) {
		t.Errorf("shell discard record %v", rec)
	}

	// Successes: latest.md, updated_at, index by any append; by-hash and
	// by-uuid entries.
	up := s.readMnt(sessRel("b") + "/updated_at")
	time.Sleep(1100 * time.Millisecond) // updated_at has one-second resolution
	testkit.Must(t, appendMnt(s.mnt(sessRel("b")+"/messages.jsonl"), `{"role":"assistant","content":[{"type":"text","text":"direct"}]}`+"\n"))
	if got := s.readMnt(sessRel("b") + "/latest.md"); got != "direct\n" {
		t.Errorf("latest.md after a direct assistant append = %q", got)
	}
	if got := s.readMnt(sessRel("b") + "/updated_at"); got == up {
		t.Errorf("updated_at not moved by an append: %q", got)
	}
	if got := s.readMnt(coderRel + "/session/index/list"); got != "b\na\n" {
		t.Errorf("index/list after appending to b = %q", got)
	}
	up = s.readMnt(sessRel("a") + "/updated_at")
	time.Sleep(1100 * time.Millisecond)
	testkit.Must(t, appendMnt(ev, `{"type":"note","text":"by hand"}`+"\n"))
	if got := s.readMnt(sessRel("a") + "/updated_at"); got == up {
		t.Errorf("updated_at not moved by an events append: %q", got)
	}
	if got := s.readMnt(coderRel + "/session/index/list"); got != "a\nb\n" {
		t.Errorf("index/list after appending to a's events = %q", got)
	}
	if got := s.readMnt(sessRel("a") + "/latest.md"); got != "hello a\n" {
		t.Errorf("latest.md of a changed by a non-assistant append: %q", got)
	}
	testkit.Must(t, os.WriteFile(idx+"/current", []byte("b"), 0))
	if got := s.readMnt(coderRel + "/session/index/current"); got != "b\n" {
		t.Errorf("current = %q", got)
	}
	uuid := "0f8fad5b-d9cb-469f-a165-70867728950e"
	testkit.Must(t, os.WriteFile(idx+"/by-hash/h1", []byte("a\n"), 0o600))
	testkit.Must(t, os.WriteFile(idx+"/by-uuid/"+uuid, []byte("a\n"), 0o600))
	testkit.Must(t, os.WriteFile(idx+"/by-hash/h1", []byte("b\n"), 0o600))
	if got := s.readMnt(coderRel + "/session/index/by-hash/h1"); got != "b\n" {
		t.Errorf("by-hash replaced = %q", got)
	}
	if got := bash(t, "ls "+idx+"/by-hash "+idx+"/by-uuid | tr '\\n' ' '"); !strings.Contains(got, "h1") || !strings.Contains(got, uuid) {
		t.Errorf("index entries listed: %q", got)
	}
	testkit.Must(t, os.Remove(idx+"/by-hash/h1"))
	testkit.Must(t, os.Remove(idx+"/by-uuid/"+uuid))
	_, err = os.Stat(idx + "/by-hash/h1")
	testkit.WantErrno(t, "unlinked by-hash entry", err, syscall.ENOENT)
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: exit %d\n%s", code, out)
	}
}

// lastEvent is the last event of type typ of root's coder session name.
func lastEvent(t *testing.T, s *server, name, typ string) frame {
	b, err := os.ReadFile(filepath.Join(s.sessionDir(0, "coder", name), "events.jsonl"))
	if err != nil {
		return nil
	}
	var last frame
	for _, l := range strings.Split(string(b), "\n") {
		var f frame
		if json.Unmarshal([]byte(l), &f) == nil && f["type"] == typ {
			last = f
		}
	}
	return last
}

// TestConcurrentWritersNeverInterleave: writers on their own descriptors
// send lines in pieces; every line lands whole, each exactly once.
func TestConcurrentWritersNeverInterleave(t *testing.T) {
	s := newFuseServer(t)
	s.send("w", "c1", "hi")
	log := s.mnt(sessRel("w") + "/events.jsonl")
	const writers, lines = 6, 60
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			for i := 0; i < lines; i++ {
				line := fmt.Sprintf(`{"type":"note","writer":%d,"n":%d,"pad":%q}`+"\n", w, i, strings.Repeat(string(rune('a'+w)), 50+i*37))
				for len(line) > 0 { // in pieces of up to 29 bytes
					k := min(len(line), 7+(i+w)%23)
					if _, err := f.WriteString(line[:k]); err != nil {
						t.Errorf("writer %d line %d: %v", w, i, err)
						return
					}
					line = line[k:]
				}
			}
		}(w)
	}
	// A shell writer at the same time.
	wg.Add(1)
	go func() {
		defer wg.Done()
		bash(t, fmt.Sprintf(`for i in $(seq 0 %d); do printf '{"type":"note","writer":%d,"n":%%d}\n' $i >> %s; done`, lines-1, writers, log))
	}()
	wg.Wait()
	b := fileBytes(t, filepath.Join(s.sessionDir(0, "coder", "w"), "events.jsonl"))
	next := map[int]int{}
	for _, l := range strings.Split(strings.TrimSuffix(b, "\n"), "\n") {
		var f struct {
			Type   string
			Writer *int
			N      int
			Pad    string
		}
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("torn or interleaved line %q: %v", l, err)
		}
		if f.Writer == nil {
			continue
		}
		if f.N != next[*f.Writer] {
			t.Fatalf("writer %d: line %d after %d", *f.Writer, f.N, next[*f.Writer]-1)
		}
		if *f.Writer < writers && f.Pad != strings.Repeat(string(rune('a'+*f.Writer)), 50+f.N*37) {
			t.Fatalf("writer %d line %d: pad mixed", *f.Writer, f.N)
		}
		next[*f.Writer]++
	}
	for w := 0; w <= writers; w++ {
		if next[w] != lines {
			t.Errorf("writer %d: %d lines recorded, want %d", w, next[w], lines)
		}
	}
	if out, code := s.fsck(); code != 0 {
		t.Errorf("fsck: exit %d\n%s", code, out)
	}
}

// TestUnprovableThroughMount: history damaged behind the server's back is
// EIO to append through the mount (nothing written), and still readable.
func TestUnprovableThroughMount(t *testing.T) {
	s := newFuseServer(t)
	s.send("d", "c1", "hello")
	settle()
	p := filepath.Join(s.sessionDir(0, "coder", "d"), "messages.jsonl")
	b := []byte(fileBytes(t, p))
	b[len(b)-5] ^= 1
	testkit.Must(t, os.WriteFile(p, b, 0o600))
	dir := s.mnt(sessRel("d"))
	for _, f := range []string{"messages.jsonl", "events.jsonl"} {
		refusal(t, s, "append to damaged history ("+f+")", syscall.EIO, func() error {
			return appendMnt(dir+"/"+f, `{"role":"user","content":"more"}`+"\n")
		})
	}
	refusal(t, s, "send through ctl to damaged history", syscall.EIO, func() error {
		f, err := os.OpenFile(dir+"/ctl", os.O_RDWR, 0)
		testkit.Must(t, err)
		defer f.Close()
		_, err = f.WriteString(`{"op":"send","id":"c2","input":"more"}` + "\n")
		return err
	})
	if got := bash(t, "cat "+dir+"/messages.jsonl"); got != string(b) {
		t.Errorf("reading damaged history: %q", got)
	}
	if got := bash(t, "wc -c < "+dir+"/messages.jsonl"); strings.TrimSpace(got) != fmt.Sprint(len(b)) {
		t.Errorf("wc -c of damaged history: %q", got)
	}
}
