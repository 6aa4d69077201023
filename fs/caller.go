package fs

import (
	"context"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// callerOf is who made a FUSE request. The kernel sends the uid, gid and
// the id of the calling thread; the thread group id (the pid users know)
// and the supplementary groups (for shared spaces) come from /proc.
func callerOf(ctx context.Context) layout.Caller {
	fc, ok := fuse.FromContext(ctx)
	if !ok {
		return layout.Caller{Uid: session.Nobody, Gid: session.Nobody}
	}
	c := layout.Caller{Uid: fc.Uid, Gid: fc.Gid, Pid: int(fc.Pid)}
	c.Pid, c.Groups = layout.ProcStatus(int(fc.Pid), fc.Uid, fc.Gid)
	return c
}

// writerPid is the process that made the request (its thread group:
// layout.ProcStatus), -1 when the kernel names none (a process the
// mount's PID namespace cannot see: never taken for a socket's peer).
func writerPid(ctx context.Context) int {
	fc, ok := fuse.FromContext(ctx)
	if !ok || fc.Pid == 0 {
		return -1
	}
	pid, _ := layout.ProcStatus(int(fc.Pid), fc.Uid, fc.Gid)
	return pid
}

// callerUid is the uid of the caller alone: no /proc read, for lookups.
func callerUid(ctx context.Context) uint32 {
	if fc, ok := fuse.FromContext(ctx); ok {
		return fc.Uid
	}
	return session.Nobody
}
