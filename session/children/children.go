// Package children owns the bookkeeping of child runs (SPEC 18): which
// runs each parent run started, the gate that lets at most MaxRunning of
// one parent's children run at once, what a child may be (its tools the
// intersection of its definition's and its parent's, its isolation at
// least as strict), and what the parent's session shows of each:
// context/child/<run>/{agent,session,status,result.md}, and the frames the
// parent records (agent.child.waiting, the child's usage, agent.child.cancel).
//
// It never starts, records or cancels a run itself: the engine hands it
// those abilities (Parent), and it never writes anywhere but through the
// Files a parent gives it.
package children

import (
	"context"
	"sync"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/agent/def"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session/reply"
)

// MaxRunning is how many children of one parent run run at once; more
// wait in phase queued (SPEC 18).
const MaxRunning = 3

// The values of a child's status file (SPEC 18).
const (
	StatusPending   = "pending"
	StatusActive    = "active"
	StatusDone      = "done"
	StatusError     = "error"
	StatusCancelled = "cancelled"
)

// Frames a parent records about its children (SPEC 18).
const (
	FrameWaiting = "agent.child.waiting" // a child's call waits for a person
	FrameCancel  = "agent.child.cancel"  // a child ended with its parent
)

// Parent is what the engine gives for the run that calls agent.create.
type Parent struct {
	Run          string
	Def          *def.Definition // the parent's (attenuated) definition
	IsChild      bool            // the parent is itself a child run
	Scope, Space string          // the parent session's scope, and its space when shared
	Files        *Files          // the parent session's context/child/; nil for a temp session
	// Record records a frame in the parent run's events, then streams
	// it, without waiting; dropped once the parent has ended.
	Record func(*proto.Object)
	// Start sends the child's request as the parent's uid to the agent
	// named: the reply's first frame is its start.
	Start func(agentName string, req *proto.Request) (*reply.Reply, error)
}

// Book is the server's children: by parent run and by child run.
type Book struct {
	// Cancel cancels a run of the engine (a child) after recording why in
	// it; false when it no longer runs.
	Cancel func(run, reason string) bool

	mu      sync.Mutex
	parents map[string]*family
	kids    map[string]*Child // running or queued children, by run
	early   map[string]bool   // children that passed the gate before Add knew them
}

// family is one parent run's children.
type family struct {
	p    Parent
	gate chan struct{}
	kids map[string]*Child // running or queued: an ended child is let go
}

// Child is one child run as its parent's session shows it.
type Child struct {
	Run, Agent, Session, Life string

	f      *family
	mu     sync.Mutex // orders the status writes
	status string
	result string
	usage  []*childUsage // by model, at most maxUsageModels
}

// maxUsageModels bounds the models whose usage one child's sums keep.
const maxUsageModels = 16

// New is an empty book; cancel cancels a child run.
func New(cancel func(run, reason string) bool) *Book {
	return &Book{Cancel: cancel, parents: map[string]*family{}, kids: map[string]*Child{}, early: map[string]bool{}}
}

// Attenuate is the definition a child of parent runs with (SPEC 18): its
// own tools that its parent has too, refused EACCES when the parent is
// jailed and the child would not be, and asking for approvals when its
// parent asks (a person who approved one agent.create did not approve
// every call of the child's: under its own `auto` they would run
// unasked); d is never changed (it is the cache's). With no such parent
// running (parent ""), d itself.
func (b *Book) Attenuate(parent string, d *def.Definition) (*def.Definition, error) {
	if parent == "" {
		return d, nil
	}
	b.mu.Lock()
	f := b.parents[parent]
	b.mu.Unlock()
	if f == nil {
		return nil, abi.Errorf(syscall.ECANCELED, def.ToolAgentCreate, "the parent run %s has ended", parent)
	}
	pd := f.p.Def
	if pd.Isolation == def.IsolationChroot && d.Isolation != def.IsolationChroot {
		return nil, abi.Errorf(syscall.EACCES, def.ToolAgentCreate, "agent %s is not isolated by chroot as its parent is", d.Name)
	}
	child := *d
	if pd.Approval == def.ApprovalAsk {
		child.Approval = def.ApprovalAsk
	}
	child.Tools = nil
	for _, t := range d.Tools {
		for _, pt := range pd.Tools {
			if t == pt {
				child.Tools = append(child.Tools, t)
			}
		}
	}
	return &child, nil
}

// Wait holds one of the parent's places for child (none for a run that
// is no child, or whose parent has ended) until ctx ends (false); release
// gives it back.
func (b *Book) Wait(ctx context.Context, parent, child string) (release func(), ok bool) {
	release = func() {}
	if parent == "" {
		return release, true
	}
	b.mu.Lock()
	f := b.parents[parent]
	b.mu.Unlock()
	if f != nil {
		select {
		case f.gate <- struct{}{}:
			release = func() { <-f.gate }
		case <-ctx.Done():
			return release, false
		}
	}
	b.mu.Lock()
	c := b.kids[child]
	if c == nil {
		b.early[child] = true
	}
	b.mu.Unlock()
	if c != nil {
		c.set(StatusActive)
	}
	return release, true
}

// family finds or makes the parent's family.
func (b *Book) family(p Parent) *family {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.parents[p.Run]
	if f == nil {
		f = &family{p: p, gate: make(chan struct{}, MaxRunning), kids: map[string]*Child{}}
		b.parents[p.Run] = f
	}
	return f
}

// add files a child just started, pending unless it passed the gate
// already, and writes its files.
func (b *Book) add(f *family, run, agentName, session, life string) *Child {
	c := &Child{Run: run, Agent: agentName, Session: session, Life: life, f: f, status: StatusPending}
	b.mu.Lock()
	f.kids[run] = c
	b.kids[run] = c
	if b.early[run] {
		delete(b.early, run)
		c.status = StatusActive
	}
	b.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	f.p.Files.write(run, fileAgent, agentName+"\n")
	f.p.Files.write(run, fileSession, session+"\n")
	f.p.Files.write(run, fileStatus, c.status+"\n")
	return c
}

// Writing is EBUSY while a child started from the session directory rel
// (store-relative) is queued or running: its watcher writes its end into
// rel's context/child/ by that path, so the session archived (or
// deleted) and made again under its name meanwhile got the end of a
// child it never started. A parent that ended ok leaves its children
// running; its session waits for them as for a run of its own.
func (b *Book) Writing(rel string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.kids {
		if c.f.p.Files != nil && c.f.p.Files.Session == rel {
			return abi.Errorf(syscall.EBUSY, "archive", "child run %s of the session still runs (ctx agent wait shows it)", c.Run)
		}
	}
	return nil
}

// End tells the book the parent run ended with status (ok, error or
// cancelled). A parent that ended ok leaves its children running (each
// still writes its files); otherwise every child still running is
// cancelled, and the frames the parent records for them (its last batch,
// before its done) are returned.
func (b *Book) End(parent, status string) []*proto.Object {
	b.mu.Lock()
	f := b.parents[parent]
	delete(b.parents, parent)
	var running []*Child
	if f != nil {
		for _, c := range f.kids {
			if b.kids[c.Run] == c {
				running = append(running, c)
			}
		}
	}
	b.mu.Unlock()
	if status == "ok" || len(running) == 0 {
		return nil
	}
	reason := "the parent run " + parent + " ended " + status
	var frames []*proto.Object
	for _, c := range running {
		if b.Cancel(c.Run, reason) {
			frames = append(frames, proto.NewObject("type", FrameCancel, "child", c.Run, "agent", c.Agent, "reason", reason))
		}
	}
	return frames
}
