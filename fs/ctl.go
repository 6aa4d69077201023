package fs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/internal/quota"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// ctlNode is a session's control file (SPEC 7): write one request line,
// read reply frames until end of file. It is virtual: owned like the
// session directory, with its read/write permissions (0600 in a home).
type ctlNode struct {
	storeNode
}

var (
	_ = (fs.NodeOpener)((*ctlNode)(nil))
	_ = (fs.NodeGetattrer)((*ctlNode)(nil))
	_ = (fs.NodeSetattrer)((*ctlNode)(nil))
)

func (n *ctlNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.SetTimeout(cacheTimeout) // the session directory's owner and mode: dirNode.Setattr
	return n.virtualAttr(&out.Attr, layout.CtlPerm, 0)
}

// Setattr: `echo … > ctl` truncates first; the engine takes that and a
// touch as no-ops.
func (n *ctlNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.setattr(ctx, in, out, n.Getattr)
}

// Open makes a stream: offsets are meaningless, and reads must reach the
// server every time (they wait for frames).
// Open counts the handle against the opener's quota of open files.
func (n *ctlNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return n.openCounted(ctx, flags, n.open)
}

func (n *ctlNode) open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	c := callerOf(ctx)
	h := &ctlHandle{node: n, caller: c, buffered: newBuffered(n.m, c.Uid), unread: newBuffered(n.m, c.Uid)}
	return h, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_STREAM | fuse.FOPEN_NONSEEKABLE, 0
}

// ctlHandle is one open control file: at most one request, then its frames.
type ctlHandle struct {
	held
	node   *ctlNode
	caller layout.Caller

	mu  sync.Mutex // guards the request side
	req []byte     // the request line so far
	// buffered counts req in the caller's share of quota.Limits.Partial;
	// deadline frees it when the request is not whole within
	// quota.RequestDeadline of its first byte, and timedOut then fails
	// every later write and read of the handle.
	buffered buffered
	deadline *time.Timer
	timedOut bool
	started  bool // a request was made (or refused)
	// oversized: the request was refused for its size (EMSGSIZE) and its
	// newline has not come. The kernel gives the server one write(2) in
	// pieces, so the write whose piece was refused returned short and
	// the writer writes the rest again (printf, Go's Write): the rest is
	// that request's, refused as it was, not a second request (EINVAL).
	oversized bool
	reply     *session.Reply
	refusal   []byte // the error frame of a refused request, until read

	readMu  sync.Mutex // one reader at a time; held while waiting for a frame
	pending []byte     // unread bytes of the current frame
	// unread counts pending in the caller's share of quota.Limits.Partial:
	// a reader that reads a byte of each of its replies' frames and no
	// more held a frame of up to 2 MiB (a resume's log line) on each of
	// its open files, counted nowhere.
	unread buffered
	eof    bool
}

var (
	_ = (fs.FileReader)((*ctlHandle)(nil))
	_ = (fs.FileWriter)((*ctlHandle)(nil))
	_ = (fs.FileReleaser)((*ctlHandle)(nil))
)

// Write collects the request line; its newline starts it. A refused
// request fails this write with its errno and leaves one error frame to
// read. A second request on the same open file is EINVAL. Only the new
// bytes are looked at for the newline. Bytes of an unfinished request
// count against the caller's share of quota.Limits.Partial (EAGAIN
// beyond, nothing kept) and must be followed by the rest within
// quota.RequestDeadline (ETIMEDOUT after).
func (h *ctlHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if bad := h.node.ended(); bad != 0 {
		return 0, bad // its session is gone: no request reaches one made anew at the path
	}
	switch {
	case h.timedOut:
		return 0, syscall.ETIMEDOUT
	case h.oversized:
		h.oversized = bytes.IndexByte(data, '\n') < 0
		return 0, syscall.EMSGSIZE
	case h.started: // the first request's reply is read on: no frame for this one
		return 0, h.logRefused("", errSecondRequest)
	}
	switch nl := bytes.IndexByte(data, '\n'); {
	case nl < 0:
		return h.keepPartial(data)
	case nl != len(data)-1:
		return h.refuse(nil, errSecondRequest)
	}
	line := append(h.req, data...)
	h.endRequest()
	req, err := proto.ParseControlRequest(line, layout.SpaceOf(h.node.place.Ref().Home))
	if err != nil {
		return h.refuse(nil, err)
	}
	req.Line = line // this handle's own copy: a follower relays it whole
	// The opener's identity is the request's, as for any descriptor; the
	// process is the one writing now, which the engine asks about (an
	// answer from a jail is refused, session.FromHost): the opener may
	// have gone, its descriptor kept by another.
	c := h.caller
	c.Pid = writerPid(ctx)
	// The run outlives this write: it must not be cancelled with it.
	reply, err := h.node.m.e.BeginControl(context.WithoutCancel(ctx), c, h.node.place.Ref(), req)
	if err != nil {
		return h.refuse(req, err)
	}
	h.reply = reply
	return uint32(len(data)), 0
}

// keepPartial keeps data, a piece of the request before its newline:
// within the one request bound of every transport (EMSGSIZE, refused
// with a frame) and the caller's share of quota.Limits.Partial (EAGAIN,
// nothing kept). The first piece starts the request's deadline. Caller
// holds h.mu.
func (h *ctlHandle) keepPartial(data []byte) (uint32, syscall.Errno) {
	size := len(h.req) + len(data)
	if err := proto.CheckRequestLength("ctl", size); err != nil {
		return h.refuse(nil, err)
	}
	if err := h.buffered.keep(size); err != nil {
		return 0, h.logRefused("", err) // nothing kept: the request is as it was
	}
	h.req = append(h.req, data...)
	if h.deadline == nil {
		h.deadline = time.AfterFunc(quota.RequestDeadline, h.timeOut)
	}
	return uint32(len(data)), 0
}

// endRequest marks the request made (or refused) and frees its bytes.
// Caller holds h.mu.
func (h *ctlHandle) endRequest() {
	h.started, h.req = true, nil
	h.buffered.keep(0)
	if h.deadline != nil {
		h.deadline.Stop()
	}
}

// timeOut is the request's deadline: an unfinished request's bytes are
// freed, and the handle answers ETIMEDOUT from then on, as a socket that
// sent no whole request in time gets ETIMEDOUT.
func (h *ctlHandle) timeOut() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		return // made, refused or released meanwhile
	}
	h.endRequest()
	h.timedOut = true
	h.logRefused("", abi.Errorf(syscall.ETIMEDOUT, "ctl", "no complete request within %s", quota.RequestDeadline))
}

// refuse fails the write with err's errno and leaves its error frame to
// read, recorded as the sockets record theirs (session.Engine.Refuse); req
// is nil when the request did not parse.
func (h *ctlHandle) refuse(req *proto.Request, err error) (uint32, syscall.Errno) {
	h.endRequest()
	h.refusal = h.node.m.e.Refuse(h.caller, h.target(), req, err).Line()
	h.oversized = errors.Is(err, syscall.EMSGSIZE)
	return 0, errno(err)
}

// errSecondRequest refuses a request after the first on one open file.
var errSecondRequest = abi.Errorf(syscall.EINVAL, "ctl", "one request per open file")

// logRefused logs a refusal that leaves no frame to read (the handle's
// one request is already answered, or none was made) and returns its
// errno.
func (h *ctlHandle) logRefused(op string, err error) syscall.Errno {
	h.node.m.e.LogRefused(h.caller, h.target(), op, err)
	return errno(err)
}

// target is the agent or model the handle's session belongs to.
func (h *ctlHandle) target() session.Target {
	owner := h.node.place.Container
	return session.Target{Kind: owner.Kind, Owner: owner.Owner}
}

// next returns what the reader should serve next: the refusal frame, or
// the reply to wait on; both nil before any request (end of file).
// ETIMEDOUT once the request's deadline passed.
func (h *ctlHandle) next() ([]byte, *session.Reply, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timedOut {
		return nil, nil, syscall.ETIMEDOUT
	}
	if f := h.refusal; f != nil {
		h.refusal = nil
		return f, nil, 0
	}
	return nil, h.reply, 0
}

// Read blocks for the next frame; end of file after the last one.
func (h *ctlHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	if len(h.pending) == 0 && !h.eof {
		if errno := h.fill(ctx, len(dest)); errno != 0 {
			return nil, errno
		}
	}
	n := copy(dest, h.pending)
	h.pending = h.pending[n:]
	h.unread.keep(len(h.pending)) // less than fill counted: never refused
	return fuse.ReadResultData(dest[:n]), 0
}

// fill takes the next frame to serve to a reader that reads size bytes
// now. What of a reply's frame that read leaves must count with the
// caller's unfinished bytes: a frame past them is not served, and the
// reply ends there with the refusal's error frame (EAGAIN), as a live
// reader that falls behind is cut; a frame is never served in part.
func (h *ctlHandle) fill(ctx context.Context, size int) syscall.Errno {
	frame, reply, bad := h.next()
	switch {
	case bad != 0:
		return bad
	case frame != nil:
		h.pending, h.eof = frame, true
		return 0
	case reply == nil:
		return 0 // no request yet: nothing to read
	}
	f, err := reply.Next(ctx)
	switch {
	case errors.Is(err, io.EOF):
		h.eof = true
	case err != nil && ctx.Err() != nil:
		return syscall.EINTR
	case err != nil:
		return errno(err)
	default:
		h.pending = f.Line()
		if err := h.unread.keep(max(len(h.pending)-size, 0)); err != nil {
			h.pending, h.eof = proto.ErrorFrame(err).Line(), true
		}
	}
	return 0
}

// Release detaches from the reply; the run goes on (SPEC 7).
func (h *ctlHandle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	if h.reply != nil {
		h.reply.Close()
	}
	h.endRequest()
	h.giveBack()
	h.mu.Unlock()
	// What was left unread goes back, under readMu alone: a read takes
	// h.mu under it.
	h.readMu.Lock()
	h.pending = nil
	h.unread.keep(0)
	h.readMu.Unlock()
	return 0
}
