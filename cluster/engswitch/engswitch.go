// Package engswitch serves one FUSE mount from an engine that may change
// while it is mounted: a cluster host serves its tree first from a
// follower's view of the store (cluster/replica), then, when it takes the
// writer's lease over, from the store's engine (*session.Engine), and back
// when it loses it. A Switch is an fs.Engine that hands each call to the
// engine installed at that moment.
//
// It owns only the handing on: which engine answers, and which engine's
// changes reach the mount's watchers (OnChange). It decides no rule and
// never touches the store; opening, closing and handing over the engines
// (the journal's replay before a writer serves, the replica's close after)
// are its caller's.
package engswitch

import (
	"context"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ctxfs/ctxfs/fs"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/freetree"
	"github.com/ctxfs/ctxfs/session/layout"
)

// Switch is an fs.Engine that answers each call with the engine installed
// when the call begins. A call already begun finishes with the engine it
// began with (a ctl request's frames keep coming from it).
type Switch struct {
	cur atomic.Pointer[installed]

	mu       sync.Mutex                                     // serialises Set and OnChange
	watchers atomic.Pointer[[]func(string, session.Change)] // copy on write: read at every change
}

// installed is one installation of an engine: its changes reach the
// watchers while it is the current one, and never after.
type installed struct{ e fs.Engine }

var _ fs.Engine = (*Switch)(nil)

// New is a switch serving e (not nil).
func New(e fs.Engine) *Switch {
	s := &Switch{}
	s.watchers.Store(&[]func(string, session.Change){})
	s.Set(e)
	return s
}

// Set makes e (not nil) answer every call from now on. The watchers
// registered with the switch hear e's changes from now on, and no longer
// the engine's it replaces (an engine keeps what is registered with it
// for good, so each installation registers one forwarder, which is silent
// once its installation is replaced). What the kernel keeps of the tree
// as the replaced engine showed it is the caller's to invalidate.
func (s *Switch) Set(e fs.Engine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := &installed{e: e}
	e.OnChange(func(rel string, how session.Change) {
		if s.cur.Load() != in {
			return // taken away
		}
		for _, w := range *s.watchers.Load() {
			w(rel, how)
		}
	})
	s.cur.Store(in)
}

// Current is the engine answering now.
func (s *Switch) Current() fs.Engine { return s.cur.Load().e }

// OnChange registers fn to hear the changes of every engine installed,
// while it is installed.
func (s *Switch) OnChange(fn func(rel string, how session.Change)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := append(append([]func(string, session.Change){}, *s.watchers.Load()...), fn)
	s.watchers.Store(&ws)
}

// Every other call is the current engine's.

func (s *Switch) Lookup(uid uint32, rel string) (session.Node, error) {
	return s.Current().Lookup(uid, rel)
}
func (s *Switch) ReadDir(rel string) ([]session.DirEntry, error) { return s.Current().ReadDir(rel) }
func (s *Switch) Stat(rel string) (*unix.Stat_t, error)          { return s.Current().Stat(rel) }
func (s *Switch) Statfs() (*unix.Statfs_t, error)                { return s.Current().Statfs() }
func (s *Switch) Gone(rel string) bool                           { return s.Current().Gone(rel) }
func (s *Switch) CheckCreate(rel string) (layout.Place, error)   { return s.Current().CheckCreate(rel) }
func (s *Switch) MakeNode(rel string) error                      { return s.Current().MakeNode(rel) }
func (s *Switch) MkdirAt(c layout.Caller, rel string) error      { return s.Current().MkdirAt(c, rel) }
func (s *Switch) Unlink(c layout.Caller, rel string) error       { return s.Current().Unlink(c, rel) }
func (s *Switch) Rmdir(c layout.Caller, rel string) error        { return s.Current().Rmdir(c, rel) }
func (s *Switch) Rename(c layout.Caller, oldRel, newRel string, flags uint32) error {
	return s.Current().Rename(c, oldRel, newRel, flags)
}
func (s *Switch) Setattr(c layout.Caller, rel string, a session.SetAttr) error {
	return s.Current().Setattr(c, rel, a)
}
func (s *Switch) CheckOpen(pl layout.Place, flags int) error { return s.Current().CheckOpen(pl, flags) }
func (s *Switch) OpenRead(c layout.Caller, rel string) (*os.File, error) {
	return s.Current().OpenRead(c, rel)
}
func (s *Switch) ReadFile(rel string, limit int64) ([]byte, error) {
	return s.Current().ReadFile(rel, limit)
}
func (s *Switch) AppendLog(c layout.Caller, r layout.Ref, file string, lines []byte) error {
	return s.Current().AppendLog(c, r, file, lines)
}
func (s *Switch) SyncLog(r layout.Ref, file string) error { return s.Current().SyncLog(r, file) }
func (s *Switch) RecordLoss(c layout.Caller, r layout.Ref, file string, n int, lost session.Lost) {
	s.Current().RecordLoss(c, r, file, n, lost)
}
func (s *Switch) Value(rel string) (session.Value, error) { return s.Current().Value(rel) }
func (s *Switch) CheckValue(pl layout.Place, data []byte) error {
	return s.Current().CheckValue(pl, data)
}
func (s *Switch) WriteFile(c layout.Caller, r layout.Ref, file string, data []byte) error {
	return s.Current().WriteFile(c, r, file, data)
}
func (s *Switch) IndexValue(pl layout.Place) (string, error) { return s.Current().IndexValue(pl) }
func (s *Switch) IndexList(ct layout.Container) ([]byte, error) {
	return s.Current().IndexList(ct)
}
func (s *Switch) WriteIndex(c layout.Caller, pl layout.Place, data []byte) error {
	return s.Current().WriteIndex(c, pl, data)
}
func (s *Switch) BeginControl(ctx context.Context, c layout.Caller, r layout.Ref, req *proto.Request) (*session.Reply, error) {
	return s.Current().BeginControl(ctx, c, r, req)
}
func (s *Switch) Refuse(c layout.Caller, t session.Target, req *proto.Request, err error) *proto.Object {
	return s.Current().Refuse(c, t, req, err)
}
func (s *Switch) LogRefused(c layout.Caller, t session.Target, op string, err error) {
	s.Current().LogRefused(c, t, op, err)
}
func (s *Switch) Limits() *quota.Limits   { return s.Current().Limits() }
func (s *Switch) FreeTree() freetree.Tree { return s.Current().FreeTree() }
