package replica

import (
	"container/list"
	"log/slog"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
)

// A follower serves a session log only once it has verified it, read-only,
// the way `ctxfs fsck` does beside a running server: against its seal,
// and where the log has grown past its seal (the writer seals at its
// journal's checkpoints), against the writer's journal (sealedlog.
// PlanJournal, JournalPlan.Verify). Damaged history is EIO at open.
//
// Bytes past what the journal holds durably, in a log the journal has an
// intent for, are appends the writer has made and not yet committed (a
// write through its mount is durable at its fsync or close, or a second
// later): they are served as the writer checked them when it took them,
// as its own mount serves them. So are the bytes the writer appends after
// a verified open: the follower reads on through the descriptor it
// verified.
//
// A verdict is kept per log, size and seal (their inode, size and times):
// a `tail -f`, a `cat` in a loop or a prompt reading the log again does
// not read the journal again until the writer changes the log or its
// seal. One verification runs at a time: reading a log back and hashing
// it is the one cost a reader can make a follower pay, and it is paid
// once per change.
//
// Opens wait their turn per uid first (the opener's: the logs it opens
// are its own and its spaces'), then the verifier's: a user who keeps the
// verifier busy with logs (many sessions, each sent to and opened again,
// its own or a space's) has one verification waiting at a time, so
// another user's open waits for at most one of each other user's, never
// for the whole of the first user's queue, even in a space both share.

// verdictsKept bounds the verdicts kept, least recently used out; one
// container (a uid's home, a space) keeps at most verdictsPerContainer of
// them, its own least recently used out, so that one user opening many
// logs cannot push everyone else's verdicts out (each pushed out costs
// its log a verification at its next open).
const (
	verdictsKept         = 4096
	verdictsPerContainer = verdictsKept / 4
)

// Retries for a log the writer was changing while it was looked at (its
// checkpoint sealed it and dropped a journal file in between): as fsck's
// beside a running server.
const (
	verifyRetries = 3
	verifyPause   = 50 * time.Millisecond
)

// verifier checks logs at open and remembers its verdicts.
type verifier struct {
	root    *storefs.Root
	journal *sealedlog.JournalReader // the writer's journal, each batch read once
	log     *slog.Logger

	// run holds the one verification under way; those waiting for it are
	// served first come, first served (a channel's waiters are queued in
	// order; a mutex lets a newcomer barge ahead of a sleeping waiter,
	// which let one container's opens pass another's again and again).
	run  chan struct{}
	runs int // verifications made (holding run): what the verdicts save
	// turns holds one waiting place per uid; verifyLog is verify
	// (a test's stand-in may hold a verification where it likes).
	turns     turns
	verifyLog func(dir, file string) (judged bool, err error)

	mu       sync.Mutex
	verdicts map[verdictKey]*list.Element // of *verdict
	lru      *list.List                   // most recently used at the front
	held     map[string]int               // verdicts kept per container
}

// fileID is what says a file did not change: inode, size and times.
type fileID struct {
	ino          uint64
	size         int64
	mtime, ctime int64
}

func idOf(st *unix.Stat_t) fileID {
	if st == nil {
		return fileID{}
	}
	return fileID{ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

type verdictKey struct {
	rel       string
	log, seal fileID
}

type verdict struct {
	key       verdictKey
	container string // layout.Container.Home of the log
	err       error  // nil: the log verified
}

func newVerifier(root *storefs.Root, journal *sealedlog.JournalReader, log *slog.Logger) *verifier {
	v := &verifier{root: root, journal: journal, log: log, verdicts: map[verdictKey]*list.Element{}, lru: list.New(), held: map[string]int{},
		run: make(chan struct{}, 1), turns: turns{by: map[uint32]*turn{}}}
	v.verifyLog = v.verify
	return v
}

// sealKey is the store's seal key as the writer keeps it (read again each
// time: it is 32 bytes, and a follower may start before the writer made it).
func (v *verifier) sealKey() *sealedlog.Key {
	return layout.ReadSealKey(v.root, func(string, string) {})
}

// check verifies the log of place pl, whose open descriptor st describes,
// for an open by uid: nil when it may be served, EIO when its history
// cannot be proven.
func (v *verifier) check(uid uint32, pl layout.Place, st *unix.Stat_t) error {
	dir := pl.Ref().Rel()
	seal, _ := v.root.Lstat(layout.SealRel(dir, pl.File))
	key := verdictKey{rel: dir + "/" + pl.File, log: idOf(st), seal: idOf(seal)}
	if err, ok := v.known(key); ok {
		return err
	}
	defer v.turns.take(uid)()
	v.run <- struct{}{}
	defer func() { <-v.run }()
	if err, ok := v.known(key); ok {
		return err // verified while this one waited
	}
	v.runs++
	judged, err := v.verifyLog(dir, pl.File)
	if err != nil && judged {
		v.log.Warn("damaged history refused", "log", v.root.Show(key.rel), "err", err)
	}
	if judged {
		v.keep(key, pl.Ref().Home, err)
	}
	return err
}

// turns are the uids' waiting places: a mutex each, kept while anyone
// holds or waits for it.
type turns struct {
	mu sync.Mutex
	by map[uint32]*turn
}

type turn struct {
	sync.Mutex
	users int // holding or waiting, under turns.mu
}

// take waits for uid's turn and returns its release.
func (ts *turns) take(uid uint32) (release func()) {
	ts.mu.Lock()
	t := ts.by[uid]
	if t == nil {
		t = &turn{}
		ts.by[uid] = t
	}
	t.users++
	ts.mu.Unlock()
	t.Lock()
	return func() {
		t.Unlock()
		ts.mu.Lock()
		if t.users--; t.users == 0 {
			delete(ts.by, uid)
		}
		ts.mu.Unlock()
	}
}

// verify checks one log: against its seal alone first (a log the writer
// has sealed, or not touched since), then, when that fails, against the
// journal (its records of this log alone, the journal's batches read
// once: sealedlog.JournalReader), read again a few times while the
// writer is changing it.
// judged is false when the journal could not be read (EIO, not kept: the
// next open tries again).
func (v *verifier) verify(dir, file string) (judged bool, err error) {
	sealKey := v.sealKey()
	identity, problem := layout.ReadIdentity(v.root, dir)
	if problem != "" {
		return true, damaged(v.root.Show(path.Join(dir, file)), []sealedlog.Problem{{What: problem}})
	}
	at := layout.LogPlace(v.root, sealKey, dir, file, identity)
	problems := sealedlog.Verify(at)
	for i := 0; i <= verifyRetries && len(problems) > 0; i++ {
		if i > 0 {
			time.Sleep(verifyPause)
		}
		plan, err := v.journal.Plan(layout.LocateLog(v.root, sealKey), true, at.Bind)
		if err != nil {
			return false, abi.Errorf(syscall.EIO, "open", "%s: the writer's journal cannot be read: %v", v.root.Show(at.Log), err)
		}
		problems = plan.Verify(at)
	}
	if len(problems) > 0 {
		return true, damaged(v.root.Show(at.Log), problems)
	}
	return true, nil
}

// damaged is the EIO of a log whose history cannot be proven.
func damaged(log string, problems []sealedlog.Problem) error {
	var what []string
	for _, p := range problems {
		what = append(what, p.What)
	}
	return abi.Errorf(syscall.EIO, "open", "%s: damaged history: %s", log, strings.Join(what, "; "))
}

// known is the verdict kept for key.
func (v *verifier) known(key verdictKey) (error, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	el, ok := v.verdicts[key]
	if !ok {
		return nil, false
	}
	v.lru.MoveToFront(el)
	return el.Value.(*verdict).err, true
}

// keep remembers a verdict of a log of container, the least recently used
// one out past the bounds: the container's own past its share, anyone's
// past the whole.
func (v *verifier) keep(key verdictKey, container string, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.verdicts[key]; ok {
		return
	}
	v.verdicts[key] = v.lru.PushFront(&verdict{key: key, container: container, err: err})
	if v.held[container]++; v.held[container] > verdictsPerContainer {
		for el := v.lru.Back(); el != nil; el = el.Prev() {
			if el.Value.(*verdict).container == container {
				v.forget(el)
				break
			}
		}
	}
	for v.lru.Len() > verdictsKept {
		v.forget(v.lru.Back())
	}
}

// forget drops a kept verdict.
func (v *verifier) forget(el *list.Element) {
	old := v.lru.Remove(el).(*verdict)
	delete(v.verdicts, old.key)
	if v.held[old.container]--; v.held[old.container] == 0 {
		delete(v.held, old.container)
	}
}
