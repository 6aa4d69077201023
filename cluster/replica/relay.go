package replica

import (
	"context"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/index"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
	"github.com/ctxfs/ctxfs/session/tree"
)

// Relay makes on the host that writes the store the changes a follower's
// mount passes on, as the caller's that this host vouches for; the writer
// applies every rule (cluster/host). Every error carries the writer's
// errno (EAGAIN when no host writes now).
type Relay interface {
	// Control begins a request written to session ref's ctl file (line
	// as the caller wrote it, proto.Request.Line). It returns once the
	// writer answered the first frame (a send's start, durable there),
	// with the reply to read on, or the writer's refusal.
	Control(ctx context.Context, c layout.Caller, ref layout.Ref, line []byte) (*session.Reply, error)
	// AppendLog appends whole lines to one of ref's logs, as a write
	// through the writer's mount does, and returns once they are durable.
	AppendLog(c layout.Caller, ref layout.Ref, file string, lines []byte) error
	// WriteFile replaces one of ref's writable values whole, as a close
	// through the writer's mount does.
	WriteFile(c layout.Caller, ref layout.Ref, file string, data []byte) error
	// RecordLoss records that n bytes a writer sent to the log were
	// dropped, as the writer's engine records its own mount's losses.
	RecordLoss(c layout.Caller, ref layout.Ref, file string, n int, lost session.Lost) error
	// Mkdir makes the directory rel (a session, a home, ...), as a mkdir
	// through the writer's mount does.
	Mkdir(c layout.Caller, rel string) error
	// WriteIndex replaces (or creates) the index value rel, and Unlink
	// removes one, as the writer's mount does.
	WriteIndex(c layout.Caller, rel string, data []byte) error
	Unlink(c layout.Caller, rel string) error
	// Setattr changes rel's attributes and Rename moves oldRel to newRel,
	// as the writer's mount does.
	Setattr(c layout.Caller, rel string, a session.SetAttr) error
	Rename(c layout.Caller, oldRel, newRel string, flags uint32) error
}

// SetRelay passes the changes a relay can make on to the writer host from
// now on: requests written to ctl files, appends to session logs (and a
// writer's lost unfinished line), writes of single values, directories
// made, index values written and removed, attributes changed, renames;
// nil refuses them with EROFS again. The free trees' changes stay EROFS.
func (r *Replica) SetRelay(rl Relay) {
	if rl == nil {
		r.relay.Store(nil)
		return
	}
	r.relay.Store(&rl)
}

// relayed is the relay of the moment, nil when there is none.
func (r *Replica) relayed() Relay {
	if p := r.relay.Load(); p != nil {
		return *p
	}
	return nil
}

// relays says whether a change at pl is relayed rather than refused: a
// ctl file's, a session log's, a single value's or an index value's,
// while a relay is set (the tree's rules say which may be written).
func (r *Replica) relays(pl layout.Place) bool {
	switch pl.Kind {
	case layout.PlaceCtl, layout.PlaceLog, layout.PlaceValue, layout.PlaceIndexCurrent, layout.PlaceIndexEntry, layout.PlaceIndexList:
		return r.relayed() != nil
	}
	return false
}

// BeginControl relays a ctl request to the writer host, or refuses it
// with EROFS when this host relays none. A request whose line the ctl
// file did not keep cannot be relayed whole (EROFS). An answer to a
// waiting call is first checked here against its writer's PID namespace
// (session.FromHost): the writer host cannot see a process of this one.
func (r *Replica) BeginControl(ctx context.Context, c layout.Caller, ref layout.Ref, req *proto.Request) (*session.Reply, error) {
	rl := r.relayed()
	if rl == nil || req.Line == nil {
		return nil, readOnly("control")
	}
	if req.Op == proto.OpApprove || req.Op == proto.OpAnswer {
		if err := session.FromHost(c); err != nil {
			return nil, err
		}
	}
	return rl.Control(ctx, c, ref, req.Line)
}

// AppendLog relays an append through this mount to the writer host,
// which makes it durable before it answers; the mount is told, as the
// writer's engine tells its own (session.Written), so that the kernel
// marks the log's attributes stale as it answers the write.
func (r *Replica) AppendLog(c layout.Caller, ref layout.Ref, file string, lines []byte) error {
	rl := r.relayed()
	if rl == nil {
		return readOnly("write")
	}
	if err := rl.AppendLog(c, ref, file, lines); err != nil {
		return err
	}
	r.announceAs(ref.Rel()+"/"+file, session.Written)
	return nil
}

// SyncLog has nothing to wait for: an append relayed is durable when
// AppendLog returns. Without a relay nothing was appended here (EROFS).
func (r *Replica) SyncLog(ref layout.Ref, file string) error {
	if r.relayed() == nil {
		return readOnly("fsync")
	}
	return nil
}

// RecordLoss relays the loss of a writer's unfinished line to the writer
// host, which records it; one the writer cannot record is logged here.
// Without a relay no write is ever taken here, so none is lost.
func (r *Replica) RecordLoss(c layout.Caller, ref layout.Ref, file string, n int, lost session.Lost) {
	rl := r.relayed()
	if rl == nil {
		return
	}
	if err := rl.RecordLoss(c, ref, file, n, lost); err != nil {
		r.log.Warn("a lost line not recorded by the writer host", "session", ref.Rel(), "file", file, "bytes", n, "uid", c.Uid, "err", err)
	}
}

// CheckValue judges a value written through this mount before its close,
// as far as its bytes and the store alone can judge it
// (tree.CheckPlainValue: state, cwd; tree.CheckIndexValue: index/current
// and entries); meta.json is judged by the writer at the close
// (WriteFile), which SPEC 5 allows ("an invalid value fails the write or
// the close").
func (r *Replica) CheckValue(pl layout.Place, data []byte) error {
	switch {
	case !r.relays(pl):
		return readOnly("write")
	case pl.Kind == layout.PlaceValue:
		return tree.CheckPlainValue(pl.File, data)
	case pl.Kind == layout.PlaceIndexCurrent, pl.Kind == layout.PlaceIndexEntry:
		return r.CheckIndexValue(pl, data)
	}
	return readOnly("write")
}

// WriteFile relays a value written through this mount (at its close) to
// the writer host, and tells the mount, as the writer's engine tells its
// own, so that the kernel reads the new value at once.
func (r *Replica) WriteFile(c layout.Caller, ref layout.Ref, file string, data []byte) error {
	rl := r.relayed()
	if rl == nil {
		return readOnly("write")
	}
	if err := rl.WriteFile(c, ref, file, data); err != nil {
		return err
	}
	r.announce(ref.Rel() + "/" + file)
	return nil
}

// MkdirAt relays a mkdir to the writer host, which applies every rule
// (the kernel's, then the engine's); what it made is in the store when it
// answers. A name the ABI does not allow there is refused here, as the
// writer refuses it (tree.Creatable: EPERM, EINVAL), since the writer
// takes no change at a name outside the tree.
func (r *Replica) MkdirAt(c layout.Caller, rel string) error {
	rl := r.relayed()
	if rl == nil {
		return readOnly("mkdir")
	}
	if _, _, archive := layout.ArchiveDir(rel); !archive {
		if _, err := tree.Creatable(rel); err != nil {
			return err
		}
	}
	return rl.Mkdir(c, rel)
}

// WriteIndex relays a write of an index value (at its close) to the
// writer host, after the checks its bytes and place alone allow (the
// tree's EPERM, the value's EINVAL); the writer's answer is durable, so
// the container's index is read again at once.
func (r *Replica) WriteIndex(c layout.Caller, pl layout.Place, data []byte) error {
	rl := r.relayed()
	switch {
	case rl == nil:
		return readOnly("write")
	case !pl.WritableIndex():
		return abi.Errorf(syscall.EPERM, "write", "read-only index file")
	}
	if _, err := index.ParseValue(data); err != nil {
		return err
	}
	if err := rl.WriteIndex(c, pl.IndexValueRel(), data); err != nil {
		return err
	}
	r.indexes.forget(pl.Container)
	return nil
}

// Unlink relays the removal of an index entry to the writer host, after
// the tree's rule (EPERM for every other entry of the ABI).
func (r *Replica) Unlink(c layout.Caller, rel string) error {
	rl := r.relayed()
	if rl == nil {
		return readOnly("unlink")
	}
	pl, err := tree.Removable(rel)
	if err != nil {
		return err
	}
	if err := rl.Unlink(c, rel); err != nil {
		return err
	}
	r.indexes.forget(pl.Container)
	return nil
}
