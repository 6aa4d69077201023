package server

import (
	"context"
	"net"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/ctxfs/ctxfs/abi"
	"github.com/ctxfs/ctxfs/proto"
	"github.com/ctxfs/ctxfs/session"
	"github.com/ctxfs/ctxfs/session/layout"
)

// ServeRemoteControl answers the one request of conn, written by caller c
// to the ctl file of session ref (store-relative directory rel) on
// another host's mount and relayed here (cluster/replica.Control): the
// request is begun exactly as one written to that ctl file on this host's
// mount (Engine.BeginControl), after the checks the kernel makes there
// for c (mayWriteCtl), and answered with its frames as a socket's is.
// conn is closed when it returns.
func (s *Sockets) ServeRemoteControl(conn net.Conn, c layout.Caller, ref layout.Ref) {
	defer conn.Close()
	c.Pid = 0 // a pid of another host means nothing here
	t := session.Target{Kind: ref.Container.Kind, Owner: ref.Container.Owner}
	s.serveWith(conn, c, t, func(e *session.Engine, req *proto.Request) (*session.Reply, error) {
		if err := mayWriteCtl(e, c, ref.Rel()); err != nil {
			return nil, err
		}
		return e.BeginControl(context.Background(), c, ref, req)
	})
}

// mayWriteCtl is the kernel's check (the mount's default_permissions) of
// c opening session directory rel's ctl file for writing, on the tree as
// this host's mount shows it to c: every directory on the way searchable
// by c (ENOENT where c's mount shows no such name), the ctl file writable
// by c (its session directory's owner, group and mode, read and write
// bits; EACCES otherwise). A follower's own mount checked the same
// before relaying; the writer checks again, for it vouches only for the
// caller's uid.
func mayWriteCtl(e *session.Engine, c layout.Caller, rel string) error {
	dir := ""
	for _, part := range strings.Split(rel, "/") {
		dir = path.Join(dir, part)
		n, err := e.Lookup(c.Uid, dir)
		if err != nil {
			return err
		}
		if !n.Dir {
			return abi.Errorf(syscall.ENOTDIR, "ctl", "%s is not a directory", dir)
		}
		if !permits(c, n.Stat.Uid, n.Stat.Gid, os.FileMode(n.Stat.Mode).Perm(), 1) {
			return abi.Errorf(syscall.EACCES, "ctl", "no search permission on %s", dir)
		}
	}
	n, err := e.Lookup(c.Uid, path.Join(rel, abi.FileCtl))
	if err != nil {
		return err
	}
	if !permits(c, n.Stat.Uid, n.Stat.Gid, os.FileMode(n.Stat.Mode).Perm()&0o666, 2) {
		return abi.Errorf(syscall.EACCES, "ctl", "%s/ctl is not writable by uid %d", rel, c.Uid)
	}
	return nil
}

// permits is the kernel's check of one permission bit (4 read, 2 write,
// 1 search of a directory) by owner, group and mode: the owner's bits for
// its owner, the group's for its members, the others' for everyone else;
// root passes every one (CAP_DAC_OVERRIDE, for files and directories
// alike where no execution is asked).
func permits(c layout.Caller, uid, gid uint32, mode os.FileMode, bit os.FileMode) bool {
	switch {
	case c.Uid == 0:
		return true
	case c.Uid == uid:
		return (mode>>6)&bit != 0
	case c.InGroup(gid):
		return (mode>>3)&bit != 0
	}
	return mode&bit != 0
}
