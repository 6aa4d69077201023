package session

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/searchop"
)

// paceFiller is a message whose text holds every rune and 3-gram of
// "zebrafish" but not the word: each segment is a candidate, and every
// line must be verified (the costly case finding 9 is about).
const paceFiller = "zebra rafi fish and a zebra's afish, "

// bigSession writes about mib MiB of filler messages to uid's session
// name, with a "zebrafish" message first and last; it returns the ref.
func (env *testEnv) bigSession(c layout.Caller, name string, mib int) layout.Ref {
	env.t.Helper()
	env.sendTo(c, name, "start")
	ref := layout.Ref{Container: layout.Container{Home: "home/" + strconv.Itoa(int(c.Uid)), Kind: "agent", Owner: "coder"}, Name: name}
	line := func(text string) []byte {
		return proto.NewObject("role", "user", "run", "r", "content", text).Line()
	}
	for i := range mib {
		var b bytes.Buffer
		if i == 0 {
			b.Write(line("the first zebrafish"))
		}
		for b.Len() < 1<<20-4096 {
			b.Write(line(strings.Repeat(paceFiller, 40)))
		}
		if i == mib-1 {
			b.Write(line("the last zebrafish"))
		}
		testkit.Must(env.t, env.e.AppendLog(c, ref, "messages.jsonl", b.Bytes()))
	}
	return ref
}

// TestSearchScanBound: a search that would read more of messages.jsonl
// than Limits.ScanBytes stops there, and its searched frame says so
// (truncated, limit "scan"), never a partial answer that looks whole; the
// index it built stays, so that searches again go further and end whole.
func TestSearchScanBound(t *testing.T) {
	env := newEnv(t)
	env.bigSession(root0, "big", 4)
	const bound = 1536 << 10 // a segment and a half
	env.e.limits.ScanBytes = bound
	// 4 MiB to index and to verify with a bound of 1.5: every search is
	// cut, and says so; each indexes a segment more, until one has the
	// index whole and finds the first match before it is cut again.
	for i := 0; ; i++ {
		got, end := env.found(root0, searchLine("zebrafish"))
		scanned, _ := strconv.ParseInt(string(end.Raw("scanned")), 10, 64)
		if end.Str("limit") != "scan" || string(end.Raw("truncated")) != "true" || scanned > bound || scanned < bound-(128<<10) {
			t.Fatalf("search %d, over the scan bound of %d: %s", i, bound, end.Line())
		}
		if len(got) > 0 {
			wantFound(t, "cut at the bound", got, "big user the first zebrafish")
			break
		}
		if i == 5 {
			t.Fatalf("the index does not go further: %s", end.Line())
		}
	}
	env.e.limits.ScanBytes = 64 << 20
	got, end := env.found(root0, searchLine("zebrafish"))
	wantFound(t, "within the bound", got, "big user the first zebrafish", "big user the last zebrafish")
	if end.Raw("limit") != nil || string(end.Raw("truncated")) != "false" {
		t.Fatalf("within the bound: %s", end.Line())
	}
}

// TestSearchPerUidQuota: a uid has at most Limits.Searches searches under
// way; the next is refused EAGAIN before any frame, another uid and root
// still search, and a search whose reply is closed, or whose engine
// closes, stops and gives its place back.
func TestSearchPerUidQuota(t *testing.T) {
	env := newEnvLimits(t, quota.LimitConfig{SearchesPerUid: 2})
	u := layout.Caller{Uid: 1001, Gid: 1001}
	ref := env.bigSession(u, "big", 1)
	// Many matches: an unread reply holds its search (waiting for room).
	var many bytes.Buffer
	for i := range 3 * searchop.FrameRoom {
		many.Write(proto.NewObject("role", "user", "content", fmt.Sprintf("zebrafish %d", i)).Line())
	}
	testkit.Must(t, env.e.AppendLog(u, ref, "messages.jsonl", many.Bytes()))
	begin := func(c layout.Caller) (*Reply, error) {
		req, err := proto.ParseRequest([]byte(searchLine("zebrafish")))
		testkit.Must(t, err)
		return env.e.Begin(context.Background(), c, coder(), req)
	}
	var held []*Reply
	for range 2 {
		r, err := begin(u)
		testkit.Must(t, err)
		t.Cleanup(r.Close)
		if f, err := r.Next(context.Background()); err != nil || f.Str("type") != proto.FrameMatch {
			t.Fatalf("first frame: %v %v", f, err)
		}
		held = append(held, r)
	}
	_, err := begin(u)
	testkit.WantErrno(t, "a third search of one uid", err, syscall.EAGAIN)
	env.found(layout.Caller{Uid: 1002, Gid: 1002}, searchLine("zebrafish"))
	env.found(root0, searchLine("zebrafish"))

	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for env.e.limits.Searches.Held(u.Uid) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("a closed search still holds its place: %d held", env.e.limits.Searches.Held(u.Uid))
		}
		time.Sleep(5 * time.Millisecond)
	}
	got, _ := env.found(u, searchLine("zebrafish"))
	if len(got) != 3*searchop.FrameRoom+2 {
		t.Fatalf("after one closed: %d matches", len(got))
	}
	// The engine's Close stops the searches under way before the store
	// closes: none holds its place once stopAll returns.
	env.e.limits.ScanSlots.StopAll()
	if n := env.e.limits.Searches.Held(u.Uid); n != 0 {
		t.Fatalf("after stopAll, %d searches of uid 1001 go on", n)
	}
}
