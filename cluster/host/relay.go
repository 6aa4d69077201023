package host

import (
	"context"
	"encoding/json"
	"errors"
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
	return peer.Control(conn, line, peer.Held{Quota: rl.h.cfg.Replica.Limits().Partial, Uid: c.Uid})
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

func (rl relayer) Mkdir(c layout.Caller, rel string) error {
	return rl.changeAt(c, rel, peer.TreeMkdir, nil)
}

func (rl relayer) WriteIndex(c layout.Caller, rel string, data []byte) error {
	return rl.changeAt(c, rel, peer.ValueWrite, data)
}

func (rl relayer) Unlink(c layout.Caller, rel string) error {
	return rl.changeAt(c, rel, peer.TreeUnlink, nil)
}

func (rl relayer) Setattr(c layout.Caller, rel string, a session.SetAttr) error {
	return rl.changeJSON(c, rel, peer.TreeSetattr, a)
}

func (rl relayer) Rename(c layout.Caller, oldRel, newRel string, flags uint32) error {
	return rl.changeJSON(c, oldRel, peer.TreeRename, peer.Rename{To: newRel, Flags: flags})
}

// changeJSON makes the change op at rel on the writer, carrying v as
// JSON.
func (rl relayer) changeJSON(c layout.Caller, rel, op string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return abi.Errorf(syscall.EINVAL, op, "%v", err)
	}
	return rl.changeAt(c, rel, op, data)
}

// change makes ch (with data) to ref's file on the writer.
func (rl relayer) change(c layout.Caller, ref layout.Ref, file string, ch peer.FileChange, data []byte) error {
	conn, err := rl.dialSession(c, ref, file)
	if err != nil {
		return err
	}
	return peer.SendChange(conn, ch, data)
}

// changeAt makes the change op (with data) at the tree's place rel on the
// writer: a hello naming the path alone.
func (rl relayer) changeAt(c layout.Caller, rel, op string, data []byte) error {
	hello := peer.HelloFor(rl.h.cfg.Identity.Host, c, session.Target{})
	hello.Path = rel
	conn, err := rl.h.dial(hello)
	if err != nil {
		return err
	}
	return peer.SendChange(conn, peer.FileChange{Op: op}, data)
}

// serveFileChange makes a change to session ref's file that another
// host's mount passed on for caller c, as a write through this host's
// mount would make it: within c's quota of connections, after the checks
// this host's kernel would make (tree.MayWrite; a host vouches only for
// the uid) and the engine's rules for an open to write it (CheckOpen); an
// append is durable before the answer. The engine decides everything.
func (h *Host) serveFileChange(conn net.Conn, c layout.Caller, ref layout.Ref, file string) {
	h.serveChange(conn, c, func(e *session.Engine, ch peer.FileChange, data []byte) error {
		return makeFileChange(e, c, ref, file, ch, data)
	})
}

// serveTreeChange makes a change at the tree's place rel (a directory
// made, an index value written or removed) that another host's mount
// passed on for caller c, as this host's mount would make it: after the
// checks its kernel would make (tree.MayCreate, MayWrite, MayRemove),
// then the engine's own.
func (h *Host) serveTreeChange(conn net.Conn, c layout.Caller, rel string) {
	h.serveChange(conn, c, func(e *session.Engine, ch peer.FileChange, data []byte) error {
		return makeTreeChange(e, c, rel, ch, data)
	})
}

// serveChange reads a change another host's mount passed on for caller
// c, within c's quota of connections, has make make it, and answers.
func (h *Host) serveChange(conn net.Conn, c layout.Caller, apply func(*session.Engine, peer.FileChange, []byte) error) {
	e := h.eng.Load()
	if e == nil {
		peer.AnswerChange(conn, abi.Errorf(syscall.EAGAIN, "write", "this host does not write the store now"))
		return
	}
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
	peer.AnswerChange(conn, apply(e, ch, data))
}

// makeFileChange checks c may write ref's file and makes ch: an append or
// a loss to a log, a write of a value.
func makeFileChange(e *session.Engine, c layout.Caller, ref layout.Ref, file string, ch peer.FileChange, data []byte) error {
	switch ch.Op {
	case peer.LogAppend, peer.LogLoss:
		if !peer.IsLog(file) {
			return abi.Errorf(syscall.EINVAL, "write", "no %s of %s", ch.Op, file)
		}
	case peer.ValueWrite:
		if !peer.IsValue(file) {
			return abi.Errorf(syscall.EINVAL, "write", "no %s of %s", ch.Op, file)
		}
	default:
		return abi.Errorf(syscall.EINVAL, "write", "no %s of a session's file", ch.Op)
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
	if err := e.AppendRelayed(c, ref, file, data); err != nil {
		return err
	}
	return e.SyncLog(ref, file)
}

// makeTreeChange checks c may make ch at rel and makes it: a mkdir (of
// whatever the writer's own mount lets c make), a write or an unlink of an
// index value SPEC 9 lets users write, a change of attributes, a rename;
// the engine's rules after the kernel's.
func makeTreeChange(e *session.Engine, c layout.Caller, rel string, ch peer.FileChange, data []byte) error {
	switch ch.Op {
	case peer.TreeMkdir:
		if pl := layout.Classify(rel); pl.Kind == layout.PlaceHome && pl.Home == layout.PrivateHome(c.Uid) {
			return e.EnsureHome(c.Uid) // its own home, on first use (SPEC 2), as a lookup here makes it
		}
		if err := e.MayCreate(c, rel); err != nil {
			return err
		}
		return e.MkdirAt(c, rel)
	case peer.TreeUnlink:
		if err := e.MayRemove(c, rel); err != nil {
			return err
		}
		return e.Unlink(c, rel)
	case peer.TreeSetattr:
		a, err := peer.DecodeAttrs(data)
		if err != nil {
			return err
		}
		if err := e.MaySetattr(c, rel, a); err != nil {
			return err
		}
		return e.Setattr(c, rel, a)
	case peer.TreeRename:
		r, err := peer.DecodeRename(data)
		if err != nil {
			return err
		}
		if err := e.MayRename(c, rel, r.To); err != nil {
			return err
		}
		return e.Rename(c, rel, r.To, r.Flags)
	case peer.ValueWrite:
		pl := layout.Classify(rel)
		if !pl.WritableIndex() {
			return abi.Errorf(syscall.EINVAL, "write", "%s is no index value a user writes", rel)
		}
		err := e.MayWrite(c, rel)
		if errors.Is(err, syscall.ENOENT) {
			err = e.MayCreate(c, rel) // open(O_CREAT) of a name not there
		}
		if err != nil {
			return err
		}
		return e.WriteIndex(c, pl, data)
	}
	return abi.Errorf(syscall.EINVAL, "change", "no %s of %s", ch.Op, rel)
}
