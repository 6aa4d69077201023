package replica

import (
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/freetree"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/sealedlog"
	"github.com/ctxfs/ctxfs/session/tree"
	"github.com/ctxfs/ctxfs/session/versions"
)

// Replica serves a store another server writes, read-only. Its methods
// are fs.Engine's (cmd/ctxfs checks that at compile time).
type Replica struct {
	tree.Tree // names, listings, the index's files: the writer's rules

	root    *storefs.Root // the store, read-only; errors name paths under the mount root
	log     *slog.Logger
	limits  *quota.Limits
	indexes *indexes
	logs    *verifier
	watch   *watcher

	watchMu  sync.Mutex
	watchers []func(rel string, how session.Change)

	relay atomic.Pointer[Relay] // nil: every change is EROFS here
}

// Open serves the store at store (a host path) as seen under mountRoot,
// read-only. The store must be a server's (storefs.CheckPrivate) and is
// never written to. The per-uid limits are read from the environment as
// the writer reads them (CTXFS_LIMITS, quota.FromEnv): a follower counts
// its users' open files and reads as the writer does. Close stops the
// watcher.
func Open(store, mountRoot string, log *slog.Logger) (*Replica, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	limits, err := quota.FromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	if err := storefs.CheckPrivate(store); err != nil {
		return nil, err
	}
	st, err := storefs.Open(store)
	if err != nil {
		return nil, err
	}
	root := st.ReadOnly().ShowAs(mountRoot)
	r := &Replica{root: root, log: log, limits: quota.NewLimits(limits)}
	// A change in a free tree takes its charge before the store refuses
	// it (EROFS) and gives it back: the charge counts what the uid keeps
	// there first, walking the store as the writer's engine does.
	r.limits.Free.CountWith(r.FreeTree().Count)
	r.Tree = tree.New(root, r)
	journal := sealedlog.NewJournalReader(root, layout.JournalDir) // each batch of the writer's journal read once
	r.indexes = newIndexes(root, journal, r.announce)
	r.logs = newVerifier(root, journal, log)
	r.watch = newWatcher(root, r.announce)
	go r.watch.run()
	return r, nil
}

// Close stops watching and closes the store.
func (r *Replica) Close() error {
	r.watch.stop()
	return r.root.Close()
}

// OnChange registers fn to be told of every change the watcher sees
// (watch.go) and every index file a reload of an index finds changed,
// from the watcher's goroutine or a caller of Index; fn must not block
// (session.Engine.OnChange says the same of the writer's).
func (r *Replica) OnChange(fn func(rel string, how session.Change)) {
	r.watchMu.Lock()
	r.watchers = append(r.watchers, fn)
	r.watchMu.Unlock()
}

// announce tells the watchers that rel changed.
func (r *Replica) announce(rel string) { r.announceAs(rel, session.Changed) }

// announceAs tells the watchers that rel changed, how.
func (r *Replica) announceAs(rel string, how session.Change) {
	r.watchMu.Lock()
	ws := r.watchers
	r.watchMu.Unlock()
	for _, w := range ws {
		w(rel, how)
	}
}

// Lookup is the writer's (tree.Lookup) without its promises: a follower
// hears of a change only when it looks (watch.go), so the kernel may keep
// no listing on the strength of an announcement.
func (r *Replica) Lookup(uid uint32, rel string) (session.Node, error) {
	n, err := r.Tree.Lookup(uid, rel)
	n.Promises = tree.Promises{}
	return n, err
}

// Stat describes the store file rel as the mount shows it, never
// following a link, and watches it for changes. A derived value the
// writer holds in memory is not in the store yet: the follower shows the
// store's file, up to behind.Every (half a second) older.
func (r *Replica) Stat(rel string) (*unix.Stat_t, error) {
	st, err := r.root.Lstat(rel)
	if err != nil {
		return nil, err // not watched: the kernel keeps no missing name (fs: no negative entries)
	}
	r.watch.seen(rel, st)
	return layout.ShownStat(rel, st), nil
}

// EnsureHome has the writer host make uid's home on its first use here,
// as the writer's own mount makes it (SPEC 2: a uid's own home appears on
// first use); without a relay, or when the writer does not answer, a home
// the store does not hold is not there on a follower (ENOENT). The
// caller is vouched for by its uid alone (the lookup knows no more): its
// group is nobody's, which grants nothing.
func (r *Replica) EnsureHome(uid uint32) error {
	home := layout.PrivateHome(uid)
	if layout.IsDir(r.root, home) {
		return nil
	}
	if rl := r.relayed(); rl != nil {
		err := rl.Mkdir(layout.Caller{Uid: uid, Gid: tree.Nobody}, home)
		if err == nil || layout.IsDir(r.root, home) {
			return nil // made now, or by a lookup beside this one
		}
	}
	return abi.Errorf(syscall.ENOENT, "lookup", "%s is made by the writer host", home)
}

// CheckOpen refuses every open for writing (EROFS, before the tree's own
// rules, as a read-only filesystem does) but a ctl file's and a session
// log's while changes are relayed (SetRelay), then applies the writer's rules, a version's
// content verified at each open included.
func (r *Replica) CheckOpen(pl layout.Place, flags int) error {
	writes := flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	if writes && !r.relays(pl) {
		return readOnly("open")
	}
	if err := r.Tree.CheckOpen(pl, flags); err != nil {
		return err
	}
	if pl.Kind == layout.PlaceVersion {
		return versions.Check(r.root, r.logs.sealKey(), pl.Ref().Rel(), pl.File)
	}
	return nil
}

// OpenRead opens the store file behind rel for reading. A session log is
// verified first against its seal and the writer's journal (verify.go),
// in c's turn: damaged history is EIO, as the writer refuses it.
func (r *Replica) OpenRead(c layout.Caller, rel string) (*os.File, error) {
	f, err := r.Tree.OpenRead(c, rel)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	r.watch.opened(rel, &st)
	if pl := layout.Classify(rel); pl.Kind == layout.PlaceLog {
		if err := r.logs.check(c.Uid, pl, &st); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// ReadFile reads the store file rel whole, at most limit bytes.
func (r *Replica) ReadFile(rel string, limit int64) ([]byte, error) {
	return r.root.ReadFile(rel, limit)
}

// Value is the single value at rel as the store holds it (the writer
// serves a derived value from memory up to behind.Every before it is in
// the store), shown as the mount shows the store's attributes.
func (r *Replica) Value(rel string) (session.Value, error) {
	data, st, err := layout.ReadValue(r.root, rel)
	if err != nil {
		return session.Value{}, err
	}
	r.watch.seen(rel, &st)
	return session.Value{Data: data, Stat: *layout.ShownStat(rel, &st)}, nil
}

// Limits are the per-uid bounds of this host's users.
func (r *Replica) Limits() *quota.Limits { return r.limits }

// FreeTree is the free trees, read through the read-only store: every
// change is EROFS there (storefs.ReadOnly).
func (r *Replica) FreeTree() freetree.Tree { return freetree.New(r.root, r.limits.Free) }

// Refuse is the error frame of a refused request; a follower records no
// refusal (it writes nothing, and the request never reached the writer).
func (r *Replica) Refuse(c layout.Caller, t session.Target, req *proto.Request, err error) *proto.Object {
	return proto.ErrorFrame(err)
}

// LogRefused records nothing on a follower.
func (r *Replica) LogRefused(c layout.Caller, t session.Target, op string, err error) {}

// readOnly is the answer to every change on a follower.
func readOnly(op string) error {
	return abi.Errorf(syscall.EROFS, op, "this host serves the store read-only; changes are made on the writer host")
}

// The changes below are relayed to the writer host (relay.go) or
// answered here by the writer's rules where they never change anything;
// without a relay each is EROFS, as a read-only filesystem answers before
// any rule, and nothing is written.

func (r *Replica) CheckCreate(rel string) (layout.Place, error) {
	if r.relayed() == nil {
		return layout.Classify(rel), readOnly("create")
	}
	return r.Tree.CheckCreate(rel)
}
func (r *Replica) MakeNode(rel string) error {
	if r.relayed() == nil {
		return readOnly("create")
	}
	return r.Tree.MakeNode(rel)
}
func (r *Replica) Rmdir(c layout.Caller, rel string) error {
	if r.relayed() == nil {
		return readOnly("rmdir")
	}
	return r.Tree.Rmdir(c, rel)
}
func (r *Replica) Setattr(c layout.Caller, rel string, a session.SetAttr) error {
	rl := r.relayed()
	switch pl := layout.Classify(rel); {
	case rl == nil:
		return readOnly("setattr")
	case pl.Kind == layout.PlaceCtl, pl.Kind == layout.PlaceIndexList, pl.Kind == layout.PlaceIndexCurrent, pl.Kind == layout.PlaceIndexEntry:
		return tree.VirtualSetattr(pl, a) // the writer's answer: nothing to change
	case pl.Kind == layout.PlaceValue && a.OnlyTimes() && a.Size != nil && *a.Size == 0:
		return nil // `>`'s truncation of a value, the writer's no-op (the write at close moves its times)
	}
	if err := rl.Setattr(c, rel, a); err != nil {
		return err
	}
	r.announceAs(rel, session.SetattrChange(a))
	return nil
}
func (r *Replica) Rename(c layout.Caller, oldRel, newRel string, flags uint32) error {
	rl := r.relayed()
	if rl == nil {
		return readOnly("rename")
	}
	if _, err := session.RenameRule(oldRel, newRel, flags); err != nil {
		return err // the writer's answer, by the names alone
	}
	if err := rl.Rename(c, oldRel, newRel, flags); err != nil {
		return err
	}
	r.announce(oldRel)
	return nil
}
