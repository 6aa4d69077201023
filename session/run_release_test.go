package session

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/runqueue"
)

// TestDeltasBeforeALineGoFirst: in a batch of a run's frames, the deltas
// before its first recorded frame report no line (SPEC 6: a frame waits
// only for the lines it reports), so they reach the client before the
// batch's sync; those after it only once it is on disk. Here the batch's
// write is refused (the store's write gate closes, as on a cluster host
// that lost its lease): the client gets the delta before the message and
// never the message nor the delta after it.
func TestDeltasBeforeALineGoFirst(t *testing.T) {
	var closed atomic.Bool
	base := t.TempDir()
	env := &testEnv{t: t, store: filepath.Join(base, "store"), root: filepath.Join(base, "root")}
	env.define("coder", map[string]string{"model": "debug/echo"})
	env.define("waiter", map[string]string{"program": "#!/bin/sh\nexec sleep 10\n"})
	e, err := Open(Config{Store: env.store, Root: env.root, Gate: func() error {
		if closed.Load() {
			return errors.New("closed by the test")
		}
		return nil
	}})
	testkit.Must(t, err)
	t.Cleanup(func() { e.Close() })
	req, err := proto.ParseRequest([]byte(`{"op":"send","id":"w1","input":"wait"}`))
	testkit.Must(t, err)
	r, err := e.Begin(context.Background(), root0, Target{Kind: abi.KindAgent, Owner: "waiter"}, req)
	testkit.Must(t, err)
	defer r.Close()
	start, err := r.Next(context.Background())
	if err != nil || start.Str("type") != proto.FrameStart {
		t.Fatalf("first frame %v, %v", start, err)
	}
	e.mu.Lock()
	rn := e.runs[start.Str("run")]
	e.mu.Unlock()
	t.Cleanup(rn.cancelRun) // its program ends with the test, whatever happens

	closed.Store(true)
	now := time.Now()
	frames := []*proto.Object{
		proto.NewObject("type", proto.FrameDelta, "text", "early"),
		proto.NewObject("type", proto.FrameMessage, "role", "assistant", "content", "the message"),
		proto.NewObject("type", proto.FrameDelta, "text", "late"),
	}
	for i, f := range frames {
		frames[i] = runqueue.Stamp(f, rn.id, now)
	}
	rn.mu.Lock()
	rn.recordBatch(frames, false, "")
	rn.mu.Unlock()
	got, err := drain(r)
	if err != nil {
		t.Fatal(err)
	}
	if types(got) != "delta" || got[0].Str("text") != "early" {
		t.Fatalf("after a batch whose write was refused, the client got %s %v; want the delta before the message alone", types(got), got)
	}
}
