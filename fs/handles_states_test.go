package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/ctxfs/ctxfs/internal/testkit"
)

// More of the log and ctl handles' states, driven as go-fuse drives them
// (handles_test.go has the environment): what a release does to a line or
// a request still open, and what a refused line leaves behind.

// losses are the error events of a session's events.jsonl that record
// lost bytes of file, as the engine serves the log.
func (v *handleEnv) losses(sess, file string) []string {
	v.t.Helper()
	b, err := v.e.ReadFile(sess+"/events.jsonl", 1<<20)
	testkit.Must(v.t, err)
	var out []string
	for _, l := range lines(string(b)) {
		if strings.Contains(l, `"type":"error"`) && strings.Contains(l, `"file":"`+file+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// The last close of a log with a line unfinished drops the line, gives
// its bytes back and records the loss (one error event naming the bytes
// and the writer): nothing of the line reaches the log.
func TestLogHandleReleaseDropsPartial(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	before := v.stored(sess + "/messages.jsonl")
	h := v.log(sess, user)
	piece := `{"role":"user","content":"never ended`
	testkit.WantErrno(t, "piece", write(h, user, piece), 0)
	testkit.WantErrno(t, "release", h.Release(context.Background()), 0)
	v.holdsNoPartial("released", user)
	if got := v.stored(sess + "/messages.jsonl"); got != before {
		t.Errorf("a dropped line reached the log: %q", got[len(before):])
	}
	lost := v.losses(sess, "messages.jsonl")
	if len(lost) != 1 || !strings.Contains(lost[0], `"code":"EINVAL"`) || !strings.Contains(lost[0], `"bytes":`+itoa(uint32(len(piece)))) || !strings.Contains(lost[0], `"uid":`+itoa(user)) {
		t.Errorf("losses %q; want one EINVAL event of %d bytes by uid %d", lost, len(piece), user)
	}
}

// A line the engine refuses fails its write (EINVAL) and is recorded
// once: the writer's retry of the same bytes is refused again without a
// second record. When the refused line began in an earlier write that
// was taken, the next close reports the errno, once; nothing of the
// line is in the log, and the next line is appended.
func TestLogHandleRefusedLine(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	before := v.stored(sess + "/messages.jsonl")
	h := v.log(sess, user)
	testkit.WantErrno(t, "not JSON", write(h, user, "not json\n"), syscall.EINVAL)
	testkit.WantErrno(t, "its retry", write(h, user, "not json\n"), syscall.EINVAL)
	if n := len(v.losses(sess, "messages.jsonl")); n != 1 {
		t.Errorf("%d losses recorded for one refused line and its retry; want 1", n)
	}
	testkit.WantErrno(t, "close after a refusal of the write itself", h.Flush(as(user)), 0)

	testkit.WantErrno(t, "a line's start", write(h, user, `{"role":"user",`), 0)
	testkit.WantErrno(t, "its bad end", write(h, user, `"content":}`+"\n"), syscall.EINVAL)
	v.holdsNoPartial("refused line", user)
	testkit.WantErrno(t, "close after a line refused mid-way", h.Flush(as(user)), syscall.EINVAL)
	testkit.WantErrno(t, "the next close", h.Flush(as(user)), 0)
	if n := len(v.losses(sess, "messages.jsonl")); n != 2 {
		t.Errorf("%d losses recorded; want 2", n)
	}
	testkit.WantErrno(t, "the next line", write(h, user, `{"role":"user","content":"ok"}`+"\n"), 0)
	testkit.WantErrno(t, "close", h.Flush(as(user)), 0)
	added := lines(strings.TrimPrefix(v.stored(sess+"/messages.jsonl"), before))
	if len(added) != 1 || !strings.Contains(added[0], `"content":"ok"`) {
		t.Errorf("appended %q; want only the next line", added)
	}
}

// A ctl handle read before any request is at end of file; released with
// a request unfinished, it gives the request's bytes back and leaves no
// frame. A write after a refused request is EINVAL, and the refused
// request's one frame is all there is to read.
func TestCtlHandleReleaseAndAfterRefusal(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	h := v.ctl(sess, user)
	if got, bad := readFrames(t, h); got != "" || bad != 0 {
		t.Errorf("read before a request: %q, %v; want end of file", got, bad)
	}
	testkit.WantErrno(t, "piece", write(h, user, `{"op":"pi`), 0)
	testkit.WantErrno(t, "release", h.Release(context.Background()), 0)
	v.holdsNoPartial("released mid-request", user)

	r := v.ctl(sess, user)
	testkit.WantErrno(t, "refused", write(r, user, `{"op":"nosuch"}`+"\n"), syscall.EINVAL)
	testkit.WantErrno(t, "after the refusal", write(r, user, `{"op":"ping"}`+"\n"), syscall.EINVAL)
	got, bad := readFrames(t, r)
	if bad != 0 || strings.Count(got, "\n") != 1 || !strings.Contains(got, `"type":"error"`) {
		t.Errorf("frames %q, %v; want the refusal's one error frame", got, bad)
	}
}

// A refused write leaves its handle nothing of its bytes: 64 descriptors
// of one user, each refused a write of 1 MiB (EINVAL) and kept open, hold
// no more of the server's heap than their own state (each kept a copy of
// its write: 64 MiB, outside the user's share of unfinished bytes).
// What a handle keeps still knows the retry of its refused write, which is
// not recorded again, from another write of the same length, which is.
func TestLogHandleRefusedWritesNotHeld(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	before := v.stored(sess + "/messages.jsonl")
	bad := bytes.Repeat([]byte("x\n"), 1<<19) // 1 MiB of lines that are not JSON
	heap := heapInUse()
	hs := make([]*logHandle, 64)
	for i := range hs {
		hs[i] = v.log(sess, user)
		if _, errno := hs[i].Write(as(user), bad, 0); errno != syscall.EINVAL {
			t.Fatalf("descriptor %d: a refused write answered %v; want EINVAL", i, errno)
		}
	}
	if grown := heapInUse() - heap; grown > 8<<20 {
		t.Errorf("64 descriptors with a refused write of 1 MiB each hold %d MiB of heap", grown>>20)
	}
	if got := v.stored(sess + "/messages.jsonl"); got != before {
		t.Errorf("refused writes reached the log: %d bytes", len(got)-len(before))
	}
	v.holdsNoPartial("refused writes", user)
	if _, errno := hs[0].Write(as(user), bad, 0); errno != syscall.EINVAL {
		t.Errorf("a retry of the refused write answered %v; want EINVAL", errno)
	}
	other := bytes.Repeat([]byte("y\n"), 1<<19)
	if _, errno := hs[0].Write(as(user), other, 0); errno != syscall.EINVAL {
		t.Errorf("another refused write of the same length answered %v; want EINVAL", errno)
	}
	if n := len(v.losses(sess, "messages.jsonl")); n != len(hs)+1 {
		t.Errorf("%d losses recorded; want %d (one per descriptor, and the other write of the same length)", n, len(hs)+1)
	}
	runtime.KeepAlive(hs)
}

// heapInUse is the bytes of live heap objects, after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// An open directory counts against its opener's quota of open files, as
// an open file does, in the directories of the ABI and of the free trees
// alike: past the share, opendir is EMFILE (and so is the open of a
// file), and Releasedir gives the place back. (An open directory holds
// its listing until its last close.)
func TestDirHandlesCounted(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	handles := v.e.Limits().Handles
	opens := map[string]fs.NodeOpendirHandler{
		"a session directory": &dirNode{storeNode: newStoreNode(v.where(sess))},
		"a free tree's":       &freeNode{m: v.m},
	}
	for kind, d := range opens {
		var held []fs.FileReleasedirer
		for {
			fh, _, errno := d.OpendirHandle(as(user), 0)
			if errno != 0 {
				testkit.WantErrno(t, kind+": opendir past the share", errno, syscall.EMFILE)
				break
			}
			held = append(held, fh.(fs.FileReleasedirer))
			if len(held) > 1<<16 {
				t.Fatalf("%s: %d directories open and no EMFILE", kind, len(held))
			}
		}
		if n := handles.Held(user); n != len(held) {
			t.Errorf("%s: %d directories open, %d counted", kind, len(held), n)
		}
		_, _, errno := (&logNode{storeNode: newStoreNode(v.where(sess + "/messages.jsonl"))}).Open(as(user), syscall.O_RDONLY)
		testkit.WantErrno(t, kind+": a file's open with the share held by directories", errno, syscall.EMFILE)
		for _, h := range held {
			h.Releasedir(context.Background(), 0)
		}
		if n := handles.Held(user); n != 0 {
			t.Errorf("%s: %d places still counted after every directory was closed", kind, n)
		}
	}
}

// A value's writer buffers the value until its last close, counted in
// the writer's share of unfinished bytes (quota.Limits.Partial) with its
// unfinished lines and requests: 16 descriptors of meta.json holding
// 1 MiB each take the share, a write past it is EAGAIN and keeps nothing,
// and a last close gives its bytes back. (Each descriptor held its 1 MiB
// uncounted: 300 of one user held 386 MiB of the server.)
func TestValueHandlesCounted(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	before := v.stored(sess + "/meta.json")
	n := &valueNode{storeNode: newStoreNode(v.where(sess + "/meta.json"))}
	open := func() *valueHandle {
		fh, _, bad := n.Open(as(user), syscall.O_WRONLY)
		if bad != 0 {
			t.Fatalf("open meta.json: %v", bad)
		}
		return fh.(*valueHandle)
	}
	unfinished := "{" + strings.Repeat(" ", 1<<20-1) // a meta.json of 1 MiB, not yet whole
	hs := make([]*valueHandle, 17)
	for i := range hs {
		hs[i] = open()
		want := syscall.Errno(0)
		if i == 16 {
			want = syscall.EAGAIN
		}
		testkit.WantErrno(t, "descriptor "+strconv.Itoa(i)+"'s value", write(hs[i], user, unfinished), want)
	}
	if len(hs[16].buf) != 0 {
		t.Errorf("a write refused for the share kept %d bytes", len(hs[16].buf))
	}
	testkit.WantErrno(t, "release", hs[0].Release(context.Background()), 0)
	testkit.WantErrno(t, "the value after a release made room", write(hs[16], user, unfinished), 0)
	for _, h := range hs[1:] {
		testkit.WantErrno(t, "release", h.Release(context.Background()), 0)
	}
	v.holdsNoPartial("every value writer closed", user)
	if got := v.stored(sess + "/meta.json"); got != before {
		t.Errorf("meta.json is %d bytes after unfinished values; want it as it was", len(got))
	}
}

// A read-only session file's copy taken at open (latest.md here, about
// 1 MB) counts in the opener's unfinished bytes until the last close: the
// opens past the share are EAGAIN, holding nothing, and a release makes
// room again. Each open used to hold its own copy, uncounted: a uid's
// open files could make the server hold gigabytes.
func TestReadOnlySnapshotsCounted(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	text := strings.Repeat("w", 1_000_000)
	testkit.WantErrno(t, "an assistant message", write(v.log(sess, user), user, `{"role":"assistant","content":"`+text+`"}`+"\n"), 0)
	n := &roNode{storeNode: newStoreNode(v.where(sess + "/latest.md"))}
	open := func() (*roHandle, syscall.Errno) {
		fh, _, bad := n.Open(as(user), syscall.O_RDONLY)
		if bad != 0 {
			return nil, bad
		}
		return fh.(*roHandle), 0
	}
	var hs []*roHandle
	for i := range 16 {
		h, bad := open()
		if bad != 0 {
			t.Fatalf("open %d of latest.md: %v", i, bad)
		}
		if !strings.Contains(string(h.snapshot.data), text) {
			t.Fatalf("latest.md holds %d bytes, not the message", len(h.snapshot.data))
		}
		hs = append(hs, h)
	}
	if _, bad := open(); bad != syscall.EAGAIN {
		t.Fatalf("an open past the share: %v, want EAGAIN", bad)
	}
	testkit.WantErrno(t, "release", hs[0].Release(context.Background()), 0)
	h, bad := open()
	if bad != 0 {
		t.Fatalf("an open after a release made room: %v", bad)
	}
	for _, h := range append(hs[1:], h) {
		testkit.WantErrno(t, "release", h.Release(context.Background()), 0)
	}
	v.holdsNoPartial("every reader closed", user)
}

// A value's copy a reader's handle takes at open (meta.json here, about
// 1 MB) counts in the opener's unfinished bytes until the last close, for
// a reader and a reader that also writes: the opens past the share are
// EAGAIN, holding and writing nothing, and a release makes room again.
// The copies were not counted: a user who rewrote its meta.json between
// opens (the engine then reads a new copy, the old one held by the
// descriptors open) made the server hold 1 MiB on each of its 1,024 open
// files.
func TestValueCopiesCounted(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	n := &valueNode{storeNode: newStoreNode(v.where(sess + "/meta.json"))}
	open := func(flags uint32) (fs.FileHandle, syscall.Errno) {
		fh, _, bad := n.Open(as(user), flags)
		return fh, bad
	}
	var meta map[string]any
	testkit.Must(t, json.Unmarshal([]byte(v.stored(sess+"/meta.json")), &meta))
	meta["pad"] = strings.Repeat("w", 1_000_000)
	big, err := json.Marshal(meta)
	testkit.Must(t, err)
	w, bad := open(syscall.O_WRONLY)
	testkit.WantErrno(t, "open meta.json to write", bad, 0)
	testkit.WantErrno(t, "a meta.json of 1 MB", write(w.(*valueHandle), user, string(big)+"\n"), 0)
	testkit.WantErrno(t, "its close", w.(fs.FileReleaser).Release(context.Background()), 0)
	before := v.stored(sess + "/meta.json")

	var hs []fs.FileHandle
	for i := range 16 {
		h, bad := open(syscall.O_RDONLY)
		if bad != 0 {
			t.Fatalf("open %d of meta.json: %v", i, bad)
		}
		hs = append(hs, h)
	}
	for _, flags := range []uint32{syscall.O_RDONLY, syscall.O_RDWR} {
		if _, bad := open(flags); bad != syscall.EAGAIN {
			t.Errorf("an open (flags %#o) past the share: %v, want EAGAIN", flags, bad)
		}
	}
	testkit.WantErrno(t, "release", hs[0].(fs.FileReleaser).Release(context.Background()), 0)
	h, bad := open(syscall.O_RDWR)
	if bad != 0 {
		t.Fatalf("an open after a release made room: %v", bad)
	}
	for _, h := range append(hs[1:], h) {
		testkit.WantErrno(t, "release", h.(fs.FileReleaser).Release(context.Background()), 0)
	}
	v.holdsNoPartial("every reader closed", user)
	if got := v.stored(sess + "/meta.json"); got != before {
		t.Errorf("meta.json is %d bytes after the refused opens; want it as it was", len(got))
	}
}
