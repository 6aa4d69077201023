package replica

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/internal/testkit"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

var (
	owner = layout.Caller{Uid: 1000, Gid: 1000}
	ref   = layout.Ref{Container: layout.Container{Home: "home/1000", Kind: abi.KindAgent, Owner: "coder"}, Name: "s"}
	msgs  = ref.Rel() + "/" + abi.FileMessages
)

// newWriter opens a store's engine (the writer) with one session holding
// one line; the store stays the writer's until the test closes it.
func newWriter(t *testing.T) (string, *session.Engine) {
	t.Helper()
	base := t.TempDir()
	store := filepath.Join(base, "store")
	e, err := session.Open(session.Config{Store: store, Root: filepath.Join(base, "ctx")})
	testkit.Must(t, err)
	testkit.Must(t, layout.MkdirAll(storeRoot(t, store), "home/1000", layout.PrivateOwner(1000, 1000)))
	testkit.Must(t, e.CreateSession(owner, ref))
	testkit.Must(t, e.AppendLog(owner, ref, abi.FileMessages, []byte(`{"role":"user","content":"one"}`+"\n")))
	testkit.Must(t, e.SyncLog(ref, abi.FileMessages))
	return store, e
}

func storeRoot(t *testing.T, store string) *storefs.Root {
	r, err := storefs.Open(store)
	testkit.Must(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

func openReplica(t *testing.T, store string) *Replica {
	r, err := Open(store, "/mnt", nil)
	testkit.Must(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

// TestVerdictKeptUntilTheLogChanges: a log is verified at its first open
// (against the writer's journal: its seal lags while the writer runs),
// not again while neither it nor its seal changes, and again once the
// writer appends; each open serves the bytes the writer wrote.
func TestVerdictKeptUntilTheLogChanges(t *testing.T) {
	store, e := newWriter(t)
	defer e.Close()
	r := openReplica(t, store)
	read := func() string {
		f, err := r.OpenRead(layout.Caller{}, msgs)
		testkit.Must(t, err)
		defer f.Close()
		b, err := os.ReadFile("/proc/self/fd/" + fmt.Sprint(f.Fd()))
		testkit.Must(t, err)
		return string(b)
	}
	first := read()
	for range 5 {
		if got := read(); got != first {
			t.Fatalf("open again: %q, want %q", got, first)
		}
	}
	if r.logs.runs != 1 {
		t.Errorf("%d verifications for six opens of an unchanged log, want 1", r.logs.runs)
	}
	testkit.Must(t, e.AppendLog(owner, ref, abi.FileMessages, []byte(`{"role":"user","content":"two"}`+"\n")))
	testkit.Must(t, e.SyncLog(ref, abi.FileMessages))
	if got := read(); len(got) <= len(first) {
		t.Errorf("after an append: %q", got)
	}
	if r.logs.runs != 2 {
		t.Errorf("%d verifications after the log grew, want 2", r.logs.runs)
	}
}

// TestReplicaRefusesAndWritesNothing: every change asked of a replica is
// EROFS, and a home the store does not hold is ENOENT (a follower makes
// none); the store is as it was.
func TestReplicaRefusesAndWritesNothing(t *testing.T) {
	store, e := newWriter(t)
	testkit.Must(t, e.Close())
	before := testkit.Snapshot(t, store, nil)
	r := openReplica(t, store)
	if _, err := r.Lookup(1001, "home/1001"); err == nil {
		t.Errorf("home/1001, which the store does not hold, is served")
	}
	testkit.WantErrno(t, "EnsureHome", r.EnsureHome(1001), syscall.ENOENT)
	if _, err := r.Index(ref.Container); err != nil {
		t.Errorf("the index: %v", err)
	}
	pl := layout.Classify(msgs)
	for what, err := range map[string]error{
		"append":     r.AppendLog(owner, ref, abi.FileMessages, []byte("{}\n")),
		"mkdir":      r.MkdirAt(owner, ref.Container.Rel()+"/t"),
		"write":      r.WriteFile(owner, ref, abi.FileState, []byte("done\n")),
		"open":       r.CheckOpen(pl, os.O_WRONLY|os.O_APPEND),
		"setattr":    r.Setattr(owner, msgs, session.SetAttr{}),
		"unlink":     r.Unlink(owner, msgs),
		"rename":     r.Rename(owner, ref.Rel(), ref.Rel()+"x", 0),
		"index":      r.WriteIndex(owner, layout.Classify(ref.Container.Rel()+"/index/current"), []byte("s\n")),
		"free mkdir": r.FreeTree().Mkdir(owner, "home/1000/agent/coder/root", 0o700),
	} {
		testkit.WantErrno(t, what, err, syscall.EROFS)
	}
	testkit.Same(t, "a replica", before, testkit.Snapshot(t, store, nil))
}

// TestWatchedBounded: the watcher keeps at most watchedMax paths, the
// least recently seen out, and announces each that falls out once, so the
// kernel asks again instead of keeping what nobody watches.
func TestWatchedBounded(t *testing.T) {
	store := t.TempDir()
	r := storeRoot(t, store)
	var told []string
	w := newWatcher(r, func(rel string) { told = append(told, rel) })
	rel := func(i int) string { return fmt.Sprintf("home/1000/agent/coder/session/s%d", i) }
	for i := range watchedMax + 10 {
		w.seen(rel(i), nil)
	}
	if n := w.lru.Len(); n != watchedMax {
		t.Errorf("%d paths watched, want %d", n, watchedMax)
	}
	told = append(told, w.poll()...)
	if len(told) != 10 || told[0] != rel(0) || told[9] != rel(9) {
		t.Errorf("announced %d paths (%v…), want the 10 least recently seen", len(told), told[:min(len(told), 3)])
	}
	testkit.Must(t, os.MkdirAll(filepath.Join(store, rel(20)), 0o700))
	if got := w.poll(); len(got) != 1 || got[0] != rel(20) {
		t.Errorf("after %s came: %v announced", rel(20), got)
	}
}

// TestVerifierTurnsPerUid: while one user's opens keep the verifier busy
// (one verification held, five more of that user's opens waiting), another
// user's open is verified next, not after all of the first user's, even
// of a log in the same shared space: each uid waits in its own line
// first, then all in one line in order.
func TestVerifierTurnsPerUid(t *testing.T) {
	v := newVerifier(storeRoot(t, t.TempDir()), nil, slog.New(slog.DiscardHandler))
	var mu sync.Mutex
	var order []string
	started, hold := make(chan struct{}), make(chan struct{})
	v.verifyLog = func(dir, file string) (bool, error) {
		mu.Lock()
		order = append(order, dir)
		first := len(order) == 1
		mu.Unlock()
		if first {
			close(started)
			<-hold
		}
		return true, nil
	}
	var wg sync.WaitGroup
	ino := uint64(0)
	open := func(uid uint32, name string) {
		ino++
		st := unix.Stat_t{Ino: ino}
		pl := layout.Classify("shared/team/agent/coder/session/" + name + "/" + abi.FileMessages)
		wg.Go(func() { v.check(uid, pl, &st) })
	}
	waiting := func(uid uint32, n int) func() bool {
		return func() bool {
			v.turns.mu.Lock()
			defer v.turns.mu.Unlock()
			return v.turns.by[uid] != nil && v.turns.by[uid].users == n
		}
	}
	open(1000, "a0")
	<-started
	for i := 1; i <= 5; i++ {
		open(1000, fmt.Sprintf("a%d", i))
	}
	eventuallyTrue(t, waiting(1000, 6)) // all five wait for their uid's turn
	open(2000, "b")
	eventuallyTrue(t, waiting(2000, 1))
	time.Sleep(50 * time.Millisecond) // b reaches the verifier's own lock
	close(hold)
	wg.Wait()
	at := slices.Index(order, "shared/team/agent/coder/session/b")
	if len(order) != 7 || at != 1 {
		t.Fatalf("verified in the order %v: the other user's log at %d, want 1 (next after the held one)", order, at)
	}
	if len(v.turns.by) != 0 {
		t.Fatalf("turns kept after every open returned: %v", v.turns.by)
	}
}

func eventuallyTrue(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
	}
}

// TestVerdictsPerContainer: one user's many logs push out its own oldest
// verdicts past its share, never another user's; the whole stays bounded.
func TestVerdictsPerContainer(t *testing.T) {
	v := newVerifier(storeRoot(t, t.TempDir()), nil, slog.New(slog.DiscardHandler))
	key := func(home string, i int) verdictKey {
		return verdictKey{rel: fmt.Sprintf("%s/agent/coder/session/s%d/messages.jsonl", home, i)}
	}
	v.keep(key("home/2000", 0), "home/2000", nil)
	for i := range 5 * verdictsPerContainer { // more than the whole bound
		v.keep(key("home/1000", i), "home/1000", nil)
	}
	if _, ok := v.known(key("home/2000", 0)); !ok {
		t.Fatal("another user's verdict was pushed out by one user's logs")
	}
	if v.held["home/1000"] != verdictsPerContainer || len(v.verdicts) != verdictsPerContainer+1 {
		t.Fatalf("kept %d of the one user's, %d in all; want %d and %d", v.held["home/1000"], len(v.verdicts), verdictsPerContainer, verdictsPerContainer+1)
	}
	if _, ok := v.known(key("home/1000", 5*verdictsPerContainer-1)); !ok {
		t.Fatal("the one user's newest verdict is not kept")
	}
	for c := range 8 { // many containers: the whole bound holds
		for i := range verdictsPerContainer {
			v.keep(key(fmt.Sprintf("home/%d", 3000+c), i), fmt.Sprintf("home/%d", 3000+c), nil)
		}
	}
	if v.lru.Len() != verdictsKept || len(v.verdicts) != verdictsKept {
		t.Fatalf("%d verdicts kept (%d in the map), want %d", v.lru.Len(), len(v.verdicts), verdictsKept)
	}
	total := 0
	for _, n := range v.held {
		total += n
	}
	if total != verdictsKept {
		t.Fatalf("per-container counts sum to %d, want %d", total, verdictsKept)
	}
}
