package fs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// These tests drive the log and ctl handles' state machines directly, as
// go-fuse would, against the real engine on a temporary store: no mount,
// so each write, read, flush and release is one call with its errno, and
// what the store holds afterwards is read from the store itself.

// handleEnv is an engine on a fresh store and the mount state its nodes
// share, with no kernel behind it.
type handleEnv struct {
	t     *testing.T
	e     *session.Engine
	m     *mountState
	root  *fs.Inode // a node tree of its own, so that a node may be notified (ENOSYS)
	store string
}

const user = 1001 // a user: its partial bytes count (root's never do)

func newHandleEnv(t *testing.T) *handleEnv {
	t.Helper()
	base := t.TempDir()
	store, root := filepath.Join(base, "store"), filepath.Join(base, "root")
	testkit.Must(t, os.MkdirAll(filepath.Join(root, "agent", "coder.d"), 0o755))
	testkit.Must(t, os.WriteFile(filepath.Join(root, "agent", "coder.d", "model"), []byte("debug/echo\n"), 0o644))
	e, err := session.Open(session.Config{Store: store, Root: root})
	testkit.Must(t, err)
	t.Cleanup(func() { e.Close() })
	ms := &Mounts{e: e, roots: map[string]*fs.Inode{}, pending: newPending(), ids: newIdentities(), done: make(chan struct{})}
	top := &fs.Inode{}
	fs.NewNodeFS(top, &fs.Options{})
	return &handleEnv{t: t, e: e, m: &mountState{e: e, top: "home", ms: ms}, root: top, store: store}
}

// session makes home/<uid>/agent/coder/session/s1 as uid, and returns its
// path.
func (v *handleEnv) session(uid uint32) string {
	v.t.Helper()
	c := layout.Caller{Uid: uid, Gid: uid, Pid: os.Getpid()}
	sess := "home/" + itoa(uid) + "/agent/coder/session/s1"
	for _, rel := range []string{"home/" + itoa(uid) + "/agent", "home/" + itoa(uid) + "/agent/coder", sess} {
		testkit.Must(v.t, v.e.MkdirAt(c, rel))
	}
	return sess
}

func itoa(uid uint32) string { return strconv.FormatUint(uint64(uid), 10) }

// as is a request context of uid, as go-fuse hands it to a handler.
func as(uid uint32) context.Context {
	return fuse.NewContext(context.Background(), &fuse.Caller{Owner: fuse.Owner{Uid: uid, Gid: uid}, Pid: uint32(os.Getpid())})
}

// where is rel in the mount state.
func (v *handleEnv) where(rel string) where {
	return where{m: v.m, rel: rel, place: layout.Classify(rel)}
}

// ctl opens rel's ctl file as uid.
func (v *handleEnv) ctl(sess string, uid uint32) *ctlHandle {
	v.t.Helper()
	n := &ctlNode{storeNode: newStoreNode(v.where(sess + "/ctl"))}
	fh, _, bad := n.Open(as(uid), syscall.O_RDWR)
	if bad != 0 {
		v.t.Fatalf("open ctl: %v", bad)
	}
	h := fh.(*ctlHandle)
	v.t.Cleanup(func() { h.Release(context.Background()) })
	return h
}

// log opens sess's messages.jsonl for writing as uid.
func (v *handleEnv) log(sess string, uid uint32) *logHandle {
	v.t.Helper()
	n := &logNode{storeNode: newStoreNode(v.where(sess + "/messages.jsonl"))}
	v.root.NewPersistentInode(context.Background(), n, fs.StableAttr{Mode: syscall.S_IFREG, Ino: inoOf(n.rel)})
	fh, _, bad := n.Open(as(uid), syscall.O_WRONLY|syscall.O_APPEND)
	if bad != 0 {
		v.t.Fatalf("open log: %v", bad)
	}
	h := fh.(*logHandle)
	v.t.Cleanup(func() { h.Release(context.Background()) })
	return h
}

// stored is what the store holds of a session's file.
func (v *handleEnv) stored(rel string) string {
	b, _ := os.ReadFile(filepath.Join(v.store, rel))
	return string(b)
}

// holdsNoPartial checks that uid holds no partial bytes: its whole share
// can still be taken.
func (v *handleEnv) holdsNoPartial(what string, uid uint32) {
	v.t.Helper()
	q := v.e.Limits().Partial
	if err := q.TakeN(uid, 16<<20); err != nil {
		v.t.Errorf("%s: uid %d still holds partial bytes: %v", what, uid, err)
		return
	}
	q.GiveN(uid, 16<<20)
}

func write(h fs.FileWriter, uid uint32, s string) syscall.Errno {
	n, bad := h.Write(as(uid), []byte(s), 0)
	if bad == 0 && int(n) != len(s) {
		return syscall.EIO // a short count: never what a handle answers
	}
	return bad
}

// readFrames reads h until end of file, in reads smaller than a frame.
func readFrames(t *testing.T, h *ctlHandle) (string, syscall.Errno) {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, 7)
	for {
		rr, bad := h.Read(context.Background(), buf, 0)
		if bad != 0 {
			return out.String(), bad
		}
		b, _ := rr.Bytes(buf)
		if len(b) == 0 {
			return out.String(), 0
		}
		out.Write(b)
	}
}

// A request may arrive in pieces; its newline starts it, and the reply's
// frames follow until end of file. A second request on the open file is
// EINVAL, with no frame.
func TestCtlHandlePartialRequest(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	h := v.ctl(sess, user)
	testkit.WantErrno(t, "first piece", write(h, user, `{"op":"pi`), 0)
	testkit.WantErrno(t, "last piece", write(h, user, `ng"}`+"\n"), 0)
	v.holdsNoPartial("request made", user)
	testkit.WantErrno(t, "second request", write(h, user, `{"op":"ping"}`+"\n"), syscall.EINVAL)
	got, bad := readFrames(t, h)
	if bad != 0 || got != `{"type":"pong"}`+"\n" {
		t.Errorf("reply %q, %v; want one pong", got, bad)
	}
}

// A refused request fails its write with its errno and leaves exactly one
// error frame to read; so does a write that holds a second line.
func TestCtlHandleRefusal(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	for _, c := range []struct{ name, req string }{
		{"unknown op", `{"op":"nosuch"}` + "\n"},
		{"two lines", `{"op":"ping"}` + "\n" + `{"op":"ping"}` + "\n"},
		{"not JSON", "ping\n"},
	} {
		h := v.ctl(sess, user)
		testkit.WantErrno(t, c.name, write(h, user, c.req), syscall.EINVAL)
		got, bad := readFrames(t, h)
		if bad != 0 || strings.Count(got, "\n") != 1 || !strings.Contains(got, `"type":"error"`) || !strings.Contains(got, `"code":"EINVAL"`) {
			t.Errorf("%s: frames %q, %v; want one EINVAL error frame", c.name, got, bad)
		}
	}
}

// A request line is bounded as on the sockets: abi.MaxRequestBytes
// without its newline are kept, one byte more is EMSGSIZE at once, with
// an error frame, and nothing stays counted.
func TestCtlHandleRequestBound(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	h := v.ctl(sess, user)
	testkit.WantErrno(t, "request of the most bytes", write(h, user, strings.Repeat("x", abi.MaxRequestBytes)), 0)
	testkit.WantErrno(t, "one byte over", write(h, user, "x"), syscall.EMSGSIZE)
	v.holdsNoPartial("refused request", user)
	// The rest of that request, written again after a short write, is
	// refused for its size up to its newline; a request after it is a
	// second request.
	testkit.WantErrno(t, "the rest of the request", write(h, user, "x"), syscall.EMSGSIZE)
	testkit.WantErrno(t, "the rest up to its newline", write(h, user, "x\n"), syscall.EMSGSIZE)
	testkit.WantErrno(t, "a second request", write(h, user, `{"op":"ping"}`+"\n"), syscall.EINVAL)
	v.holdsNoPartial("refused request's rest", user)
	got, bad := readFrames(t, h)
	if bad != 0 || !strings.Contains(got, `"code":"EMSGSIZE"`) || strings.Count(got, "\n") != 1 {
		t.Errorf("frames %q, %v; want one EMSGSIZE error frame", got, bad)
	}
}

// The bytes of unfinished requests count against the writer's share of
// quota.Limits.Partial: a piece over it is EAGAIN and nothing of it is
// kept, and bytes given back (a release) make room again.
func TestCtlHandlePartialBudget(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	piece := strings.Repeat("x", abi.MaxRequestBytes)
	var held []*ctlHandle
	for i := 0; i < 16; i++ { // the share: 16 requests of the largest size
		h := v.ctl(sess, user)
		testkit.WantErrno(t, "a share's request", write(h, user, piece), 0)
		held = append(held, h)
	}
	over := v.ctl(sess, user)
	testkit.WantErrno(t, "over the share", write(over, user, "x"), syscall.EAGAIN)
	if len(over.req) != 0 {
		t.Errorf("refused piece kept: %d bytes", len(over.req))
	}
	held[0].Release(context.Background())
	testkit.WantErrno(t, "after a release", write(over, user, `{"op":"ping"}`), 0)
	testkit.WantErrno(t, "its newline", write(over, user, "\n"), 0)
	for _, h := range held[1:] {
		h.Release(context.Background())
	}
	v.holdsNoPartial("all released", user)
}

// A request not whole within quota.RequestDeadline of its first byte is
// dropped: its bytes are given back, and every later write and read of
// the handle is ETIMEDOUT. (This test waits for the real deadline.)
func TestCtlHandleDeadline(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	h := v.ctl(sess, user)
	testkit.WantErrno(t, "first piece", write(h, user, `{"op":`), 0)
	limit := time.Now().Add(quota.RequestDeadline + 5*time.Second)
	for {
		_, bad := h.Read(context.Background(), make([]byte, 10), 0)
		if bad == syscall.ETIMEDOUT {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("no ETIMEDOUT %s after the first byte (read: %v)", quota.RequestDeadline+5*time.Second, bad)
		}
		time.Sleep(100 * time.Millisecond)
	}
	v.holdsNoPartial("timed out", user)
	testkit.WantErrno(t, "write after the deadline", write(h, user, `"ping"}`+"\n"), syscall.ETIMEDOUT)
}

// A log line may arrive in pieces and is appended whole at its newline;
// a close with a line unfinished is EINVAL and keeps it pending (another
// descriptor of the open file may finish it); nothing of it reaches the
// store before its newline.
func TestLogHandlePartialLines(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	h := v.log(sess, user)
	before := v.stored(sess + "/messages.jsonl")
	testkit.WantErrno(t, "first piece", write(h, user, `{"role":"user","content":"a`), 0)
	testkit.WantErrno(t, "close mid-line", h.Flush(as(user)), syscall.EINVAL)
	if got := v.stored(sess + "/messages.jsonl"); got != before {
		t.Errorf("an unfinished line reached the store: %q", got[len(before):])
	}
	testkit.WantErrno(t, "rest and a second line", write(h, user, `b"}`+"\n"+`{"role":"user","content":"c"}`+"\n"), 0)
	testkit.WantErrno(t, "close after whole lines", h.Flush(as(user)), 0)
	v.holdsNoPartial("lines ended", user)
	added := lines(strings.TrimPrefix(v.stored(sess+"/messages.jsonl"), before))
	if len(added) != 2 || !strings.Contains(added[0], `"content":"ab"`) || !strings.Contains(added[1], `"content":"c"`) {
		t.Errorf("appended %q; want the two lines whole", added)
	}
}

// A line that grows over abi.MaxLineBytes is refused at once (EINVAL),
// and so is the rest of it up to its newline; the next line is appended,
// and nothing of the refused one is in the store.
func TestLogHandleRefusesLongLine(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	h := v.log(sess, user)
	before := v.stored(sess + "/messages.jsonl")
	testkit.WantErrno(t, "line over the limit", write(h, user, `{"role":"user","content":"`+strings.Repeat("x", abi.MaxLineBytes)), syscall.EINVAL)
	v.holdsNoPartial("refused line", user)
	testkit.WantErrno(t, "the rest of the refused line", write(h, user, `xx"}`+"\n"), syscall.EINVAL)
	testkit.WantErrno(t, "the next line", write(h, user, `{"role":"user","content":"ok"}`+"\n"), 0)
	added := lines(strings.TrimPrefix(v.stored(sess+"/messages.jsonl"), before))
	if len(added) != 1 || !strings.Contains(added[0], `"content":"ok"`) {
		t.Errorf("appended %d bytes %.200q; want only the next line", len(added), added)
	}
}

// Unfinished lines count against the writer's share of
// quota.Limits.Partial, across descriptors: a write over it is EAGAIN,
// nothing of it is kept, and the pending line stays as it was.
func TestLogHandlePartialBudget(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	piece := `{"role":"user","content":"` + strings.Repeat("x", abi.MaxLineBytes-len(`{"role":"user","content":"`))
	for i := 0; i < 16; i++ {
		testkit.WantErrno(t, "a share's line", write(v.log(sess, user), user, piece), 0)
	}
	over := v.log(sess, user)
	testkit.WantErrno(t, "the start of a line", write(over, user, `{"role":"user",`), syscall.EAGAIN)
	if len(over.partial) != 0 {
		t.Errorf("refused write kept: %d bytes", len(over.partial))
	}
	testkit.WantErrno(t, "a whole line needs no share", write(over, user, `{"role":"user","content":"ok"}`+"\n"), 0)
}

// The line buffers handles keep between lines, which the writer's share
// does not count, are small: 400 descriptors whose lines ended in pieces
// of 40 KiB keep less than the share (16 MiB) between them.
func TestLogHandleKeptBufferCounted(t *testing.T) {
	v := newHandleEnv(t)
	sess := v.session(user)
	piece := `{"role":"user","content":"` + strings.Repeat("x", 40<<10)
	kept := 0
	for i := 0; i < 400; i++ {
		h := v.log(sess, user)
		testkit.WantErrno(t, "a line's first piece", write(h, user, piece), 0)
		testkit.WantErrno(t, "its end", write(h, user, `"}`+"\n"), 0)
		kept += cap(h.partial)
	}
	if share := 16 << 20; kept > share {
		t.Errorf("descriptors keep %d bytes of line buffers between lines; the share is %d", kept, share)
	}
}
