package session

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session/layout"
)

var uid1000 = layout.Caller{Uid: 1000, Gid: 1000, Pid: 1}

// tempSend is a send of input to the temp session name, by client id.
func tempSend(name, id, input string) string {
	return fmt.Sprintf(`{"op":"send","id":%q,"session":%q,"scope":"temp","input":%q}`, id, name, input)
}

// tempRef is uid's temp session name of the agent coder.
func tempRef(uid uint32, name string) layout.Ref {
	return layout.Ref{Container: layout.Container{Home: layout.PrivateHome(uid), Kind: abi.KindAgent, Owner: "coder"}, Name: name, Temp: true}
}

// tempBytes is what the temp session r's logs hold (-1: no such session).
func (env *testEnv) tempBytes(r layout.Ref) int64 {
	env.e.temps.mu.Lock()
	defer env.e.temps.mu.Unlock()
	t := env.e.temps.byKey[r.Key()]
	if t == nil {
		return -1
	}
	return t.s.msgs.Size() + t.s.events.Size()
}

// A uid holds at most its count of temp sessions and its bytes in their
// logs: a new temp session beyond the count, and a send whose input would
// pass the bytes, are EAGAIN and write nothing (not the store, not the
// sessions held). Within them, a replay, a send that fits and another
// uid's temp session still go.
func TestTempSessionsBoundedPerUid(t *testing.T) {
	env := newEnvLimits(t, quota.LimitConfig{TempSessionsPerUid: 2, TempBytesPerUid: 8 << 10})
	first := env.send(uid1000, coder(), tempSend("t0", "c0", "hello"))
	env.send(uid1000, coder(), tempSend("t1", "c1", "hello"))
	before, held := env.settledTree(), []int64{env.tempBytes(tempRef(1000, "t0")), env.tempBytes(tempRef(1000, "t1"))}
	for _, line := range []string{
		tempSend("t2", "c2", "hello"),                    // a third session
		tempSend("t0", "c3", strings.Repeat("y", 8<<10)), // past the bytes
		tempSend("t2", "c4", strings.Repeat("y", 8<<10)), // both
	} {
		_, err := env.do(uid1000, coder(), line)
		testkit.WantErrno(t, line[:60], err, syscall.EAGAIN)
	}
	testkit.Same(t, "refused temp sends", before, testkit.Snapshot(t, env.store, nil))
	got := []int64{env.tempBytes(tempRef(1000, "t0")), env.tempBytes(tempRef(1000, "t1")), env.tempBytes(tempRef(1000, "t2"))}
	if got[0] != held[0] || got[1] != held[1] || got[2] != -1 {
		t.Fatalf("temp sessions' bytes after the refusals: %v, want %v and no t2", got, held)
	}

	replay := env.send(uid1000, coder(), tempSend("t0", "c0", "hello"))
	if replay[0].Str("run") != first[0].Str("run") {
		t.Fatalf("the replay started run %s, want %s", replay[0].Str("run"), first[0].Str("run"))
	}
	env.send(uid1000, coder(), tempSend("t0", "c5", "more"))
	env.send(layout.Caller{Uid: 1001, Gid: 1001, Pid: 1}, coder(), tempSend("t2", "c2", "hello"))
}

// A temp session is dropped once it has no run and nobody used it for
// the idle time, and not before: while it is used, its client gets its
// status and replays; a run longer than the idle time keeps it, and its
// end counts as a use. Once dropped, its uid's count has room again.
func TestTempSessionDroppedWhenIdle(t *testing.T) {
	const idle = 300 * time.Millisecond
	env := newEnvLimits(t, quota.LimitConfig{TempSessionsPerUid: 1, TempIdle: idle})
	env.define("slow", map[string]string{"program": sleeper, "abi": "text"})
	slow := Target{Kind: abi.KindAgent, Owner: "slow"}
	ref := layout.Ref{Container: layout.Container{Home: "home/0", Kind: abi.KindAgent, Owner: "slow"}, Name: "long", Temp: true}
	r := env.begin(root0, slow, tempSend("long", "s1", "go"))
	next(t, r)
	time.Sleep(3 * idle)
	if !env.e.sessionExists(ref) {
		t.Fatal("a temp session with a run was dropped")
	}
	env.send(root0, slow, `{"op":"cancel","id":"s1","session":"long","scope":"temp"}`)
	drain(r)
	if !env.e.sessionExists(ref) {
		t.Fatal("the temp session went as its run ended")
	}
	waitDropped(t, env, ref, idle)

	first := env.send(uid1000, coder(), tempSend("t0", "c0", "hello"))
	for i := 0; i < 3; i++ { // each use keeps it idle longer
		time.Sleep(idle / 2)
		replay := env.send(uid1000, coder(), tempSend("t0", "c0", "hello"))
		if replay[0].Str("run") != first[0].Str("run") || types(replay) != "start,done" {
			t.Fatalf("replay %d: %s of run %s, want start,done of %s", i, types(replay), replay[0].Str("run"), first[0].Str("run"))
		}
	}
	_, err := env.do(uid1000, coder(), tempSend("t1", "c1", "hello"))
	testkit.WantErrno(t, "a second temp session", err, syscall.EAGAIN)
	waitDropped(t, env, tempRef(1000, "t0"), idle)
	env.send(uid1000, coder(), tempSend("t1", "c1", "hello"))
}

// waitDropped waits until the temp session r is gone, which must not take
// much longer than idle.
func waitDropped(t *testing.T, env *testEnv, r layout.Ref, idle time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(idle + 5*time.Second); env.e.sessionExists(r); time.Sleep(idle / 10) {
		if time.Now().After(deadline) {
			t.Fatalf("temp session %s was not dropped when idle", r.Name)
		}
	}
}

// One uid sending large inputs to new temp sessions, one after the other
// (only 32 runs at once), cannot make the server hold more than its
// temp sessions' bytes: the sends past them are refused (EAGAIN).
func TestTempSessionsHoldBoundedMemory(t *testing.T) {
	env := newEnv(t)
	input := strings.Repeat("x", 512<<10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	refused := 0
	for i := 0; i < 200; i++ {
		_, err := env.do(uid1000, coder(), tempSend(fmt.Sprintf("t%d", i), "c", input))
		switch {
		case errors.Is(err, syscall.EAGAIN):
			refused++
		case err != nil:
			t.Fatalf("send %d: %v", i, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d of 200 sends refused; the heap grew %d MiB", refused, held>>20)
	if bound := int64(2 * env.e.limits.TempBytes); held > bound || refused == 0 {
		t.Fatalf("uid 1000's 200 temp sends of 512 KiB: %d refused, the heap grew %d MiB (at most %d)", refused, held>>20, bound>>20)
	}
}

// A temp session's status after its run says how the run ended and when,
// as a stored session's does: its state and updated_at are held in memory
// (it has no files), not reported idle and 0.
func TestTempSessionStatusAfterRun(t *testing.T) {
	env := newEnv(t)
	start := time.Now().Unix()
	env.send(uid1000, coder(), tempSend("t0", "c0", "hello"))
	st := env.send(uid1000, coder(), `{"op":"status","session":"t0","scope":"temp"}`)
	if st[0].Str("state") != abi.StateDone {
		t.Errorf("temp session state after a run: %s", st[0].Line())
	}
	if at, err := strconv.ParseInt(string(st[0].Raw("updated_at")), 10, 64); err != nil || at < start || at > time.Now().Unix() {
		t.Errorf("temp session updated_at after a run: %s, want about %d", st[0].Line(), start)
	}
	if fresh := env.send(uid1000, coder(), `{"op":"status","session":"t9","scope":"temp"}`); fresh[0].Str("state") != abi.StateIdle {
		t.Errorf("status of a temp session never sent to: %s", fresh[0].Line())
	}
}
