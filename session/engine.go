// Package session is the session engine: it owns the store's session
// directories, their verified logs and single-value files, sends and
// replays, runs and their frames, and the rules of SPEC sections 4 to 9.
//
// Every transport (the agent sockets, the control files, the FUSE
// projection) calls the engine; none of them decides a rule. The engine
// never reads the FUSE mount: it works on store paths only.
package session

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/ctxfs/ctxfs/index"
)

// Config says where the engine keeps and finds things.
type Config struct {
	Store string // the store directory (absolute)
	Root  string // the mount root (absolute): agent/ and model/ definitions, and the paths programs see
}

// Target is what a request was addressed to: the agent or model whose
// socket it came through (or whose session holds the control file).
type Target struct {
	Kind  string // abi.KindAgent or abi.KindModel
	Owner string // agent name or "provider/model"
}

// Engine is the session engine of one store.
type Engine struct {
	cfg Config

	sessions *cache[*sess]        // by store-relative path, or Ref.key for temp sessions
	indexes  *cache[*index.Index] // by container Rel

	mu   sync.Mutex
	runs map[string]*run // every queued or running run, by run id

	selfMu   sync.Mutex // serialises self_id claims
	watchMu  sync.Mutex
	watchers []func(rel string)
	stateDir string // <store>/.ctxfs: the server's own bookkeeping (never history)
	journal  *runJournal
}

// Open opens the store (creating it if needed) and closes runs that were
// active when a previous server died.
func Open(cfg Config) (*Engine, error) {
	if err := os.MkdirAll(cfg.Store, 0o755); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		sessions: newCache[*sess](),
		indexes:  newCache[*index.Index](),
		runs:     map[string]*run{},
		stateDir: filepath.Join(cfg.Store, ".ctxfs"),
	}
	for _, d := range []string{e.stateDir, filepath.Join(cfg.Store, "home"), filepath.Join(cfg.Store, "shared")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(e.stateDir, 0o700); err != nil {
		return nil, err
	}
	if err := e.closeInterrupted(); err != nil {
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
	for _, s := range e.sessions.all() {
		keep(s.events.Close())
		keep(s.msgs.Close())
	}
	for _, x := range e.indexes.all() {
		keep(x.Close())
	}
	if e.journal != nil {
		keep(e.journal.close())
	}
	return first
}

// Store is the store directory.
func (e *Engine) Store() string { return e.cfg.Store }

// Root is the mount root.
func (e *Engine) Root() string { return e.cfg.Root }

// OnChange registers fn to be told the store-relative path of every file the
// engine changes. fn is called from the engine's own goroutine, never while
// the engine holds a lock that a FUSE handler may wait for.
func (e *Engine) OnChange(fn func(rel string)) {
	e.watchMu.Lock()
	e.watchers = append(e.watchers, fn)
	e.watchMu.Unlock()
}

// changed tells the watchers, asynchronously, that rel changed.
func (e *Engine) changed(rel ...string) {
	e.watchMu.Lock()
	ws := e.watchers
	e.watchMu.Unlock()
	if len(ws) == 0 {
		return
	}
	go func() {
		for _, r := range rel {
			for _, w := range ws {
				w(r)
			}
		}
	}()
}

// path is the store path of a store-relative path.
func (e *Engine) path(rel string) string { return filepath.Join(e.cfg.Store, rel) }
