// Package session is the session engine: it owns the store's session
// directories, their verified logs and single-value files, sends and
// replays, runs and their frames, and the rules of SPEC sections 4 to 9.
//
// Every transport (the agent sockets, the control files, the FUSE
// projection) calls the engine; none of them decides a rule. The engine
// never reads the FUSE mount: it works on store paths only.
package session

import (
	"context"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/proto"
)

// Config says where the engine keeps and finds things.
type Config struct {
	Store string // the store directory (absolute)
	Root  string // the mount root (absolute): agent/ and model/ definitions, and the paths programs see
}

// Target is what a request was addressed to: the agent or model whose
// socket it came through (or whose session holds the control file).
type Target struct {
	Kind  string // KindAgent or KindModel
	Owner string // agent name or "provider/model"
}

var errNotYet = abi.Errorf(syscall.ENOSYS, "", "not implemented yet")

// Begin validates and starts one request. It returns an error (an
// *abi.Error) when the request is refused, before anything is written;
// otherwise a Reply whose frames the caller reads with Next until io.EOF.
// For send, Begin returns once the start frame is recorded durably.
func (e *Engine) Begin(ctx context.Context, c Caller, t Target, req *proto.Request) (*Reply, error) {
	return nil, errNotYet
}

// BeginControl is Begin for a line written to a session's ctl file: the
// request's session and scope, when present, must name r and its scope.
func (e *Engine) BeginControl(ctx context.Context, c Caller, r Ref, line []byte) (*Reply, error) {
	return nil, errNotYet
}

// EnsureHome creates home/<uid> in the store on first use, owned by uid, 0700.
func (e *Engine) EnsureHome(uid uint32) error { return errNotYet }

// CreateSession makes a new session directory with the initial layout
// (mkdir session/<name> through the mount). EEXIST if it exists, EINVAL for a
// bad name.
func (e *Engine) CreateSession(c Caller, r Ref) error { return errNotYet }

// AppendLog appends whole lines (each ending in "\n") to messages.jsonl or
// events.jsonl, as a writer through the mount does. EINVAL (nothing
// written) when any line is invalid, EIO when the log is unprovable, EPERM
// for any other file. An assistant message updates latest.md; every append
// updates updated_at and the index.
func (e *Engine) AppendLog(c Caller, r Ref, file string, lines []byte) error { return errNotYet }

// DiscardPartialLine records, as an error event with code EINVAL, that a
// writer closed file with n bytes of an unfinished line, which were dropped.
func (e *Engine) DiscardPartialLine(c Caller, r Ref, file string, n int) {}

// WriteFile replaces a writable single-value file (state, cwd) or meta.json
// whole, after validating the new value (a missing final newline is added).
// EINVAL for an invalid value, EEXIST for a self_id taken, EPERM for a file
// that is not writable. The old value stays on any error.
func (e *Engine) WriteFile(c Caller, r Ref, file string, data []byte) error { return errNotYet }

// Index returns the index of a container, loading it on first use.
func (e *Engine) Index(ct Container) (*index.Index, error) { return nil, errNotYet }

// OnChange registers fn to be told the store-relative path of every file the
// engine changes. fn is called from the engine's own goroutine, never while
// the engine holds a lock that a FUSE handler may wait for.
func (e *Engine) OnChange(fn func(rel string)) {}

// Engine is the session engine of one store.
type Engine struct {
	cfg Config
}

// Open opens the store (creating it if needed) and closes runs that were
// active when a previous server died.
func Open(cfg Config) (*Engine, error) { return &Engine{cfg: cfg}, nil }

// Close syncs and closes everything.
func (e *Engine) Close() error { return nil }

// Store is the store directory.
func (e *Engine) Store() string { return e.cfg.Store }
