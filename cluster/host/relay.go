package host

import (
	"context"
	"net"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/cluster/peer"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// relayer passes a follower mount's changes on to the writer host
// (replica.Relay): each on a connection of its own, whose hello vouches
// for the local caller and names the session (and the file).
type relayer struct{ h *Host }

// dialSession connects to the writer for a change to session ref (and
// to its file, when file is not "").
func (rl relayer) dialSession(c layout.Caller, ref layout.Ref, file string) (net.Conn, error) {
	hello := peer.HelloFor(rl.h.cfg.Identity.Host, c, session.Target{Kind: ref.Container.Kind, Owner: ref.Container.Owner})
	hello.Session, hello.File = ref.Rel(), file
	return rl.h.dial(hello)
}

func (rl relayer) Control(ctx context.Context, c layout.Caller, ref layout.Ref, line []byte) (*session.Reply, error) {
	conn, err := rl.dialSession(c, ref, "")
	if err != nil {
		return nil, err
	}
	return peer.Control(conn, line)
}

func (rl relayer) AppendLog(c layout.Caller, ref layout.Ref, file string, lines []byte) error {
	return rl.change(c, ref, file, peer.FileChange{Op: peer.LogAppend}, lines)
}

func (rl relayer) WriteFile(c layout.Caller, ref layout.Ref, file string, data []byte) error {
	return rl.change(c, ref, file, peer.FileChange{Op: peer.ValueWrite}, data)
}

func (rl relayer) RecordLoss(c layout.Caller, ref layout.Ref, file string, n int, lost session.Lost) error {
	ch := peer.FileChange{Op: peer.LogLoss, Size: n, Errno: abi.ErrnoName(lost.Errno), Why: lost.Why}
	return rl.change(c, ref, file, ch, nil)
}

// change makes ch (with data) to ref's file on the writer.
func (rl relayer) change(c layout.Caller, ref layout.Ref, file string, ch peer.FileChange, data []byte) error {
	conn, err := rl.dialSession(c, ref, file)
	if err != nil {
		return err
	}
	return peer.SendChange(conn, ch, data)
}

// serveFileChange makes a change to session ref's file that another
// host's mount passed on for caller c, as a write through this host's
// mount would make it: within c's quota of connections, after the checks
// this host's kernel would make (tree.MayWrite; a host vouches only for
// the uid) and the engine's rules for an open to write it (CheckOpen); an
// append is durable before the answer. The engine decides everything.
func (h *Host) serveFileChange(conn net.Conn, c layout.Caller, ref layout.Ref, file string) {
	e := h.eng.Load()
	if e == nil {
		peer.AnswerChange(conn, abi.Errorf(syscall.EAGAIN, "write", "this host does not write the store now"))
		return
	}
	c.Pid = 0 // a pid of another host means nothing here
	if err := e.Limits().Conns.Take(c.Uid); err != nil {
		peer.AnswerChange(conn, err)
		return
	}
	defer e.Limits().Conns.Give(c.Uid)
	ch, data, err := peer.ReadChange(conn)
	if err != nil {
		peer.AnswerChange(conn, err)
		return
	}
	peer.AnswerChange(conn, makeFileChange(e, c, ref, file, ch, data))
}

// makeFileChange checks c may write ref's file and makes ch: an append or
// a loss to a log, a write of a value.
func makeFileChange(e *session.Engine, c layout.Caller, ref layout.Ref, file string, ch peer.FileChange, data []byte) error {
	if peer.IsLog(file) == (ch.Op == peer.ValueWrite) {
		return abi.Errorf(syscall.EINVAL, "write", "no %s of %s", ch.Op, file)
	}
	rel := ref.Rel() + "/" + file
	if err := e.MayWrite(c, rel); err != nil {
		return err
	}
	flags := syscall.O_WRONLY
	if peer.IsLog(file) {
		flags |= syscall.O_APPEND
	}
	if err := e.CheckOpen(layout.Classify(rel), flags); err != nil {
		return err
	}
	switch ch.Op {
	case peer.ValueWrite:
		return e.WriteFile(c, ref, file, data)
	case peer.LogLoss:
		errno, _ := abi.ErrnoFromName(ch.Errno) // checked by ReadChange
		e.RecordLoss(c, ref, file, ch.Size, session.Lost{Errno: errno, Why: ch.Why})
		return nil
	}
	if err := e.AppendLog(c, ref, file, data); err != nil {
		return err
	}
	return e.SyncLog(ref, file)
}
