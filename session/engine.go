// Package session is the session engine: it owns the store's session
// directories, their verified logs and single-value files, sends and
// replays, runs and their frames, and the rules of SPEC sections 4 to 9.
//
// Every transport (the agent sockets, the control files, the FUSE
// projection) calls the engine; none of them decides a rule. The engine
// never reads the FUSE mount: it works on the store, and only through one
// door (internal/storefs), which never follows a symlink a user could
// have made. The store is root's alone (0700): users reach it through the
// mount and the sockets, and programs the engine runs get paths under the
// mount, never store paths.
package session

import (
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/agent/prompt"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/internal/loadcache"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/internal/storefs"
	"github.com/ctxfs/ctxfs/session/behind"
	"github.com/ctxfs/ctxfs/session/children"
	"github.com/ctxfs/ctxfs/session/freetree"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/memo"
	"github.com/ctxfs/ctxfs/session/reply"
	"github.com/ctxfs/ctxfs/session/runsfile"
	"github.com/ctxfs/ctxfs/session/sealedlog"
	"github.com/ctxfs/ctxfs/session/tree"
	"github.com/ctxfs/ctxfs/session/waiting"
)

// Reply is one request's stream of frames (package reply), as the
// transports read it.
type Reply = reply.Reply

// Config says where the engine keeps and finds things, and how much it
// may hold.
type Config struct {
	Store string // the store directory (absolute)
	Root  string // the mount root (absolute): agent/ and model/ definitions, and the paths programs see
	// MaxSessions bounds the sessions kept loaded when nobody uses them
	// (each holds four descriptors); 0: from the descriptor limit
	// (SessionBudget).
	MaxSessions int
	// Limits overrides the per-uid quotas (quota.Limits; the server reads
	// them from CTXFS_LIMITS); zero: the defaults.
	Limits quota.LimitConfig
	// Journal sets the write-ahead journal's checkpoints (the server reads
	// them from CTXFS_CHECKPOINT_*); zero: the defaults.
	Journal sealedlog.JournalConfig
	// Token and Gate make it a cluster's writer host (SPEC 19): its fencing
	// token (0: none; the journal is fenced with it before replay), and
	// whether it may still write (nil: always; sealedlog, storefs.SetGate).
	Token uint64
	Gate  func() error
	// Log gets a line at each run's start and end (its id, agent or
	// model, session, scope and uid; never its input nor its output);
	// nil: nowhere.
	Log *slog.Logger
}

func (c Config) maxSessions() int {
	if c.MaxSessions > 0 {
		return c.MaxSessions
	}
	return quota.SessionBudget()
}

// Target is what a request was addressed to: the agent or model whose
// socket it came through (or whose session holds the control file).
type Target struct {
	Kind  string // abi.KindAgent or abi.KindModel
	Owner string // agent name or "provider/model"
}

// Engine is the session engine of one store.
type Engine struct {
	tree.Tree // what the mount asks of the tree's names (package tree)

	cfg   Config
	root  *storefs.Root // the store; errors name paths under the mount root, as clients see them
	admin *storefs.Root // the same store; errors name store paths, for the operator

	sessions *loadcache.Cache[*sess]        // by store-relative path
	temps    *tempSessions                  // the temp sessions, by Ref.Key (temp.go)
	indexes  *loadcache.Cache[*index.Index] // by container Rel

	mu   sync.Mutex
	runs map[string]*run // every queued or running run, by run id

	selfMu   sync.Mutex    // serialises self_id claims
	agentMu  sync.Mutex    // serialises the making of agents a home lacks (makeAgent)
	memo     memo.Memo     // single values served from memory (Value)
	prompts  *prompt.Memos // what a session's prompts keep for its next ones (prompt.go)
	watchMu  sync.Mutex
	watchers []func(rel string, how Change)
	running  *runsfile.File     // the runs under way, for the next start (runsfile.go)
	wal      *sealedlog.Journal // every append to a session log goes through it
	sealKey  *sealedlog.Key     // every seal record is keyed with it (layout/sealkey.go)
	derived  *behind.Queue      // derived values not yet in the store
	limits   *quota.Limits      // what users may make the engine hold
	defs     *def.Cache         // agent and model definitions, read again when they change
	waiting  *waiting.Registry  // the calls waiting for a person (run_tools.go)
	kids     *children.Book     // the runs' child runs (run_tools.go)
}

// Open opens the store (creating it if needed, 0700), makes sure it is
// the server's alone (storefs.Secure), and closes runs that were active
// when a previous server died.
func Open(cfg Config) (*Engine, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	store, err := layout.OpenStore(cfg.Store)
	if err != nil {
		return nil, err
	}
	store.SetGate(cfg.Gate) // shared by e.root, a ShowAs copy
	e := &Engine{
		cfg:      cfg,
		root:     store.ShowAs(cfg.Root),
		admin:    store,
		sessions: loadcache.New[*sess](cfg.maxSessions(), (*sess).idle, (*sess).evict),
		indexes:  loadcache.New[*index.Index](0, nil, nil),
		runs:     map[string]*run{},
		limits:   quota.NewLimits(cfg.Limits),
		defs:     def.NewCache(),
		prompts:  prompt.NewMemos(),
		waiting:  waiting.New(waiting.Config{PerUid: cfg.Limits.WaitingPerUid}),
	}
	e.Tree = tree.New(e.root, e)
	e.temps = newTempSessions(e.limits)
	e.kids = children.New(e.cancelChild)
	e.derived = behind.New(derivedStore{e}, cfg.Log)
	var migrated int
	if e.sealKey, migrated, err = layout.OpenSealKey(store); err != nil {
		store.Close()
		return nil, err
	}
	if migrated > 0 {
		cfg.Log.Info("seals migrated: keyed with the store's seal key", "seals", migrated)
	}
	if closed, err := layout.CloseHistory(store); err != nil {
		store.Close()
		return nil, err
	} else if closed > 0 {
		cfg.Log.Info("history migrated: owned by the server, closed to users", "files", closed)
	}
	e.limits.Free.CountWith(e.FreeTree().Count)     // the free trees' walk needs the store
	e.limits.Names.CountWith(e.namesOf)             // and so do the counts of names
	e.limits.Agents.CountWith(e.agentsOf)           // and of agents
	e.limits.History.CountWith(e.firstHistoryCount) // and of bytes of history
	if err := e.openWAL(); err != nil {
		store.Close()
		return nil, err
	}
	go e.derived.Run()
	if err := e.closeInterrupted(); err != nil {
		e.derived.Close()
		e.wal.Close()
		store.Close()
		return nil, err
	}
	return e, nil
}

// Close cancels nothing (runs end with the process) but seals and closes
// every open log and flushes the indexes.
func (e *Engine) Close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	e.limits.ScanSlots.StopAll() // no search reads the store any more
	e.derived.Close()
	e.derived.Flush("", true) // what waits in memory, before the logs close
	for _, s := range e.sessions.All() {
		keep(s.events.Close())
		keep(s.msgs.Close())
	}
	for _, x := range e.indexes.All() {
		keep(x.Close())
	}
	if e.wal != nil {
		keep(e.wal.Close()) // after the logs: each Close checkpoints its own
	}
	keep(e.running.Close())
	if e.root != nil {
		keep(e.root.Close())
	}
	return first
}

// Abandon is for a writer host that lost its lease: the store's gate shut
// for good, it cancels every run (their programs are killed), waits up to
// abandonWait for them, and stops the journal and the derived values'
// writer; nothing more reaches the store (EAGAIN), Close included.
func (e *Engine) Abandon() {
	e.admin.ShutGate()
	e.wal.Abandon() // first: the runs' ends are not recorded
	e.running.Abandon()
	e.mu.Lock()
	runs := slices.Collect(maps.Values(e.runs))
	e.mu.Unlock()
	for _, rn := range runs {
		rn.cancelRun()
	}
	stop := time.After(abandonWait)
	for _, rn := range runs {
		select {
		case <-rn.over:
		case <-stop:
		}
	}
	e.derived.Close() // what waits in memory stays there
}

// abandonWait bounds Abandon's wait for its runs (SIGTERM, SIGKILL 2 s later).
const abandonWait = 10 * time.Second

// FreeTree is the free trees as the FUSE projection serves them.
func (e *Engine) FreeTree() freetree.Tree { return freetree.New(e.root, e.limits.Free) }

// OnChange registers fn to be told the store-relative path of every file
// and directory the engine changes, and how. fn is called synchronously,
// after the change and before it is acknowledged to anyone (a frame, a
// system call returning), from whatever goroutine made it, FUSE handlers
// included and sometimes with a session's locks held: fn must never block
// on anything (the FUSE projection only marks the kernel's attributes
// stale, which never waits, and queues the rest for a goroutine of its
// own).
func (e *Engine) OnChange(fn func(rel string, how Change)) {
	e.watchMu.Lock()
	e.watchers = append(e.watchers, fn)
	e.watchMu.Unlock()
}

// Change is how a file changed, for the watchers.
type Change int

const (
	// Changed: anything the engine did (the watchers assume the worst).
	Changed Change = iota
	// Written: lines a writer appended to a log through the mount
	// (AppendLog), in the FUSE WRITE it is answering. The kernel that sent
	// the WRITE marks the size and times of the file it wrote through
	// stale itself once the WRITE is answered (fuse_write_update_attr), so
	// the mount need not tell it (notify.go).
	Written
	// Touched: times set to times given (a touch -d, a cp -p) through
	// the mount: the store's times are the ones to show, where a change
	// otherwise moves the shown times up to the change's moment (fs's
	// stamp), which would hide a time set in the past.
	Touched
)

// changed drops what the engine holds in memory of each rel and tells the
// watchers. Every change the engine makes to a file or directory of the
// tree must be announced here (or by changedBy), right after it: the memo
// (Value) and the kernel's caches of the mounts are kept exact by it and
// by nothing else.
func (e *Engine) changed(rel ...string) {
	for _, r := range rel {
		e.changedBy(Changed, r)
	}
}

// changedBy announces one change of rel, made as how says.
func (e *Engine) changedBy(how Change, rel string) {
	if how != Written { // a log's lines, which the memo never holds
		e.memo.Forget(rel)
	}
	e.watchMu.Lock()
	ws := e.watchers
	e.watchMu.Unlock()
	for _, w := range ws {
		w(rel, how)
	}
}

// mountPath is where a store-relative path is seen under the mount: what
// programs the engine runs are given, never the store's host path.
func (e *Engine) mountPath(rel string) string {
	if rel == "." || rel == "" {
		return e.cfg.Root
	}
	return e.cfg.Root + "/" + rel
}
